"""Template writes (staff): create, update, delete. The API and the admin go through these.

Every JSON field is validated with ``containers.spec.clean_template_fields`` before it is
saved, so a template that cannot make a container is refused (``InvalidSpec`` naming the
field) instead of failing later in a worker. Each service runs in one transaction and is
not idempotent (a second create with the same name is refused).
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from containers.errors import DomainError, InvalidSpec, NotFound
from containers.models import ContainerTemplate
from containers.spec import clean_template_fields

# The fields a caller may set; everything else (image status, timestamps) is gobrave's.
WRITABLE = ("name", "image", "command", "env", "volumes", "resources", "constraints", "pull_policy")


class TemplateInUse(DomainError):
    """The template still has instances (they keep a protected reference) (HTTP 409)."""

    code = "template_in_use"
    http_status = 409


def _clean(fields: dict[str, Any]) -> dict[str, Any]:
    unknown = set(fields) - set(WRITABLE)
    if unknown:
        raise InvalidSpec(f"unknown template fields: {', '.join(sorted(unknown))}", field="")
    return {**fields, **clean_template_fields(**fields)}


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
    template = ContainerTemplate(**_clean(fields))
    _save(template, update_fields=None)
    return template


def template_update(*, template_id: int, **fields: Any) -> ContainerTemplate:
    """Validate and apply ``fields`` to the template, under its row lock.

    Running and queued instances are not affected: each carries the spec resolved when
    it was requested.
    """
    cleaned = _clean(fields)
    with transaction.atomic():
        template = ContainerTemplate.objects.select_for_update().filter(pk=template_id).first()
        if template is None:
            raise NotFound(f"no template {template_id}", template=str(template_id))
        for name, value in cleaned.items():
            setattr(template, name, value)
        if cleaned:
            _save(template, update_fields=[*cleaned, "updated_at"])
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
