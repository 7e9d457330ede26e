"""The filters and orderings of the containers API's lists (``core.api.filters``)."""

from __future__ import annotations

from containers.models import ContainerInstance, ContainerTemplate, Runtime
from containers.states import Status
from core.api.filters import ListFilterSet, NameOrIdFilter, ordering, statuses


class InstanceFilter(ListFilterSet):
    status = statuses(Status.choices)
    owner = NameOrIdFilter(name_field="username", help_text="The owner's id or username.")
    template = NameOrIdFilter(help_text="The template's id or name.")
    runtime = NameOrIdFilter(help_text="The runtime's id or name.")
    ordering = ordering("created_at", "name", "status", "status_changed_at", default="-created_at")

    class Meta:
        model = ContainerInstance
        fields: list[str] = []


class TemplateFilter(ListFilterSet):
    ordering = ordering("name", "created_at", "updated_at", default="name")

    class Meta:
        model = ContainerTemplate
        fields: list[str] = []


class RuntimeFilter(ListFilterSet):
    ordering = ordering("name", "created_at", "health", default="name")

    class Meta:
        model = Runtime
        fields: list[str] = []
