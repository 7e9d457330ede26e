"""Who may see and act on what, in the API as in the admin (one rule, model permissions).

- A user sees and acts on their own instances. Seeing anyone's needs
  ``containers.view_containerinstance``; acting on anyone's needs
  ``containers.change_containerinstance``. The staff flag grants nothing by itself.
- A user sees and uses a template only while it is enabled and, when it is limited to
  groups, only as a member of one of them (a superuser: every enabled template).
  ``containers.view_containertemplate`` shows every template (switched off or limited)
  but does not make it usable.
Reads only; nothing here writes.
"""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q

from containers.models import ContainerInstance, ContainerTemplate

VIEW_INSTANCES = "containers.view_containerinstance"
CHANGE_INSTANCES = "containers.change_containerinstance"
VIEW_TEMPLATES = "containers.view_containertemplate"


def sees_all_instances(user) -> bool:
    return user.has_perm(VIEW_INSTANCES)


def may_operate(user, instance: ContainerInstance) -> bool:
    """True if ``user`` may start, stop or delete ``instance``."""
    return instance.owner_id == user.pk or user.has_perm(CHANGE_INSTANCES)


def sees_all_templates(user) -> bool:
    return user.has_perm(VIEW_TEMPLATES)


def usable_templates_q(user) -> Q:
    """The templates ``user`` may use: enabled, and open to them (see the module docstring)."""
    enabled = Q(enabled=True)
    if getattr(user, "is_superuser", False):
        return enabled
    links = ContainerTemplate.allowed_groups.through.objects.filter(
        containertemplate_id=OuterRef("pk")
    )
    if user is None or not user.is_authenticated:
        return enabled & ~Exists(links)
    return enabled & (~Exists(links) | Exists(links.filter(group__user=user)))


# Set on a template object read through ``usable_templates_q(user)`` (``mark_usable``):
# that very object passed the rule for that user when it was read.
_USABLE_FOR = "_gobrave_usable_for"


def mark_usable(template: ContainerTemplate, user) -> ContainerTemplate:
    """Mark ``template``, just read with ``usable_templates_q(user)``, as usable by
    ``user``: ``may_use_template`` then answers for this object without asking the
    database again (a request reads its template once, then hands it to the service).
    Only the object read is marked; any other read of the template asks again."""
    if user is not None and user.pk is not None:
        setattr(template, _USABLE_FOR, user.pk)
    return template


def may_use_template(user, template: ContainerTemplate) -> bool:
    if user is not None and user.pk is not None and getattr(template, _USABLE_FOR, None) == user.pk:
        return True  # read through the same rule for this user (``mark_usable``)
    return ContainerTemplate.objects.filter(usable_templates_q(user), pk=template.pk).exists()
