"""Reads on whole engines: what a decommission would forget. No engine call."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from containers.errors import NotFound
from containers.models import ContainerInstance, Runtime
from containers.signals import runtime_placements


@dataclass(frozen=True)
class Forgotten:
    """One instance a decommission would forget, and its container on the engine."""

    id: uuid.UUID
    name: str
    status: str
    owner: str
    container_name: str
    container_id: str


@dataclass(frozen=True)
class DecommissionPreview:
    """What ``runtime_decommission`` would forget on ``runtime``: its instances (with
    their containers' names) and what other apps placed there (DAG runs), one line each."""

    runtime: Runtime
    instances: list[Forgotten]
    others: list[str]


def runtime_decommission_preview(*, runtime_id: object) -> DecommissionPreview:
    """Everything placed on the runtime, as the confirmation shows it. Two queries plus
    one per receiver of ``runtime_placements``; no lock, no engine call. ``NotFound`` for
    no such runtime."""
    runtime = Runtime.objects.filter(pk=runtime_id).first() if str(runtime_id).isdigit() else None
    if runtime is None:
        raise NotFound(f"no runtime {runtime_id}", runtime=str(runtime_id))
    rows = (
        ContainerInstance.objects.filter(runtime=runtime)
        .select_related("owner")
        .order_by("created_at")
    )
    instances = [
        Forgotten(
            id=row.id,
            name=row.name,
            status=row.status,
            owner=row.owner.get_username(),
            container_name=row.container_name,
            container_id=row.container_id,
        )
        for row in rows
    ]
    answers = runtime_placements.send(sender=Runtime, runtime=runtime)
    others = [line for _, lines in answers for line in (lines or [])]
    return DecommissionPreview(runtime=runtime, instances=instances, others=others)
