"""The filters and orderings of the DAG API's lists (``core.api.filters``)."""

from __future__ import annotations

from core.api.filters import ListFilterSet, NameOrIdFilter, ordering, statuses
from dags.models import DagRun, DagTemplate
from dags.states import RunStatus


class DagRunFilter(ListFilterSet):
    status = statuses(RunStatus.choices)
    owner = NameOrIdFilter(name_field="username", help_text="The owner's id or username.")
    template = NameOrIdFilter(help_text="The DAG template's id or name.")
    runtime = NameOrIdFilter(help_text="The runtime's id or name.")
    ordering = ordering(
        "created_at", "status", "status_changed_at", "template_name", default="-created_at"
    )

    class Meta:
        model = DagRun
        fields: list[str] = []


class DagTemplateFilter(ListFilterSet):
    ordering = ordering("name", "created_at", "updated_at", default="name")

    class Meta:
        model = DagTemplate
        fields: list[str] = []
