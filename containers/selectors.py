"""Reads: querysets with the joins their callers need, and nothing that writes."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q, QuerySet

from containers.errors import NotFound
from containers.models import ContainerInstance, ContainerTemplate


def instance_list(*, statuses: Iterable[str] = (), user=None) -> QuerySet[ContainerInstance]:
    """Instances newest first; a non-staff ``user`` sees only their own."""
    rows = ContainerInstance.objects.select_related("template", "runtime", "owner")
    if statuses:
        rows = rows.filter(status__in=list(statuses))
    if user is not None and not user.is_staff:
        rows = rows.filter(owner=user)
    return rows.order_by("-created_at")


def template_by_ref(ref: str | int) -> ContainerTemplate:
    """A template by id or by name."""
    query = Q(name=str(ref))
    if str(ref).isdigit():
        query |= Q(pk=int(ref))
    template = ContainerTemplate.objects.filter(query).first()
    if template is None:
        raise NotFound(f"no template {ref!r}", template=str(ref))
    return template
