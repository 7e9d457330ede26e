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


def may_use_template(user, template: ContainerTemplate) -> bool:
    return ContainerTemplate.objects.filter(usable_templates_q(user), pk=template.pk).exists()
