"""Template writes (operators): create, update, delete. The API and the admin go through these.

Every JSON field is validated with ``containers.spec.resolve.clean_template_fields`` (and the
volume sources with ``check_volume_roots``) before it is saved, so a template that cannot
make a container is refused (``InvalidSpec`` naming the field) instead of failing later in
a worker. Each service runs in one transaction and is
not idempotent (a second create with the same name is refused).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from containers.errors import InvalidSpec, NotFound, TemplateInUse
from containers.models import ContainerTemplate
from containers.spec.kubernetes_fit import kubernetes_problems, kubernetes_runtimes_for
from containers.spec.policies import POLICY_FIELDS, template_policy_check
from containers.spec.resolve import check_volume_roots, clean_template_fields

# The template's JSON fields, each checked by ``clean_template_fields``.
JSON_FIELDS = (
    "command",
    "env",
    "user_env",
    "secret_env",
    "volumes",
    "resources",
    "security",
    "constraints",
)
# The fields a caller may set, in the admin form's order; everything else (image status,
# timestamps) is gobrave's.
WRITABLE = (
    "name",
    "image",
    "pull_policy",
    *JSON_FIELDS,
    *POLICY_FIELDS,
    "enabled",
    "allowed_groups",
)


def _clean(fields: dict[str, Any], current: ContainerTemplate | None = None) -> dict[str, Any]:
    """Validate ``fields``; on an update, ``secret_env`` is checked against the env the
    template will have (the new one, or its current one)."""
    unknown = set(fields) - set(WRITABLE)
    if unknown:
        raise InvalidSpec(f"unknown template fields: {', '.join(sorted(unknown))}", field="")
    groups = fields.pop("allowed_groups", None)
    cleaned = {**fields, **clean_template_fields(**fields)}
    if "volumes" in cleaned:  # a host path no request could use is refused now, not at create
        check_volume_roots(
            cleaned["volumes"], settings.GOBRAVE["container"]["allowed_volume_roots"]
        )
    if current is not None and ("env" in cleaned or "secret_env" in cleaned):
        clean_template_fields(
            env=cleaned.get("env", current.env),
            secret_env=cleaned.get("secret_env", current.secret_env),
        )
    template_kubernetes_check(cleaned, current)
    template_policy_check(cleaned, current)
    if groups is not None:
        cleaned["allowed_groups"] = _groups(groups)
    return cleaned


def template_kubernetes_check(cleaned: dict[str, Any], current: ContainerTemplate | None) -> None:
    """``InvalidSpec`` when the template (as it will be) could be placed on a Kubernetes
    runtime and asks what Pod Security "restricted" forbids (``spec.kubernetes_fit``).
    The API's writes and the admin's form both ask it. Reads the runtimes."""

    def value(name: str, empty: Any) -> Any:
        if name in cleaned:
            return cleaned[name] or empty
        return (getattr(current, name, None) or empty) if current is not None else empty

    runtimes = kubernetes_runtimes_for(value("constraints", {}))
    if not runtimes:
        return
    problems = kubernetes_problems(
        security=value("security", {}),
        volumes=value("volumes", []),
        config=settings.GOBRAVE["container"]["security"],
    )
    if problems:
        field = problems[0].split(":")[0].split(".")[0]
        raise InvalidSpec(
            f"{problems[0]} (the template may run on Kubernetes runtime {runtimes[0]})",
            field=field,
        )


def _groups(names: list[str]) -> list[Group]:
    """The groups named, or ``InvalidSpec`` naming the first that does not exist."""
    found = {group.name: group for group in Group.objects.filter(name__in=list(names))}
    for name in names:
        if name not in found:
            raise InvalidSpec(f"allowed_groups: no group {name!r}", field="allowed_groups")
    return [found[name] for name in dict.fromkeys(names)]


def _save(template: ContainerTemplate, *, update_fields: list[str] | None) -> None:
    try:
        with transaction.atomic():
            template.save(update_fields=update_fields)
    except IntegrityError:
        raise InvalidSpec(
            f"name: a template named {template.name!r} already exists", field="name"
        ) from None


def template_create(**fields: Any) -> ContainerTemplate:
    """Validate and insert a template. Raises ``InvalidSpec`` naming the bad field."""
    cleaned = _clean(fields)
    groups = cleaned.pop("allowed_groups", None)
    with transaction.atomic():
        template = ContainerTemplate(**cleaned)
        _save(template, update_fields=None)
        if groups:
            template.allowed_groups.set(groups)
    return template


def template_update(*, template_id: int, **fields: Any) -> ContainerTemplate:
    """Validate and apply ``fields`` to the template, under its row lock.

    Running and queued instances are not affected: each carries the spec resolved when
    it was requested. Writing ``user_env`` clears ``user_env_removed`` (the note of rules
    an upgrade removed).
    """
    with transaction.atomic():
        template = ContainerTemplate.objects.select_for_update().filter(pk=template_id).first()
        if template is None:
            raise NotFound(f"no template {template_id}", template=str(template_id))
        cleaned = _clean(fields, template)
        groups = cleaned.pop("allowed_groups", None)
        if "user_env" in cleaned and template.user_env_removed:
            cleaned["user_env_removed"] = []  # the operator has written user_env anew
        for name, value in cleaned.items():
            setattr(template, name, value)
        if cleaned:
            _save(template, update_fields=[*cleaned, "updated_at"])
        if groups is not None:
            template.allowed_groups.set(groups)
    return template


def template_delete(*, template_id: int) -> None:
    """Delete a template no instance uses; refuses with ``TemplateInUse`` otherwise."""
    with transaction.atomic():
        template = ContainerTemplate.objects.select_for_update().filter(pk=template_id).first()
        if template is None:
            raise NotFound(f"no template {template_id}", template=str(template_id))
        try:
            with transaction.atomic():
                template.delete()
        except ProtectedError:
            raise TemplateInUse(
                f"template {template.name} still has instances; delete them first",
                template=template.name,
            ) from None
