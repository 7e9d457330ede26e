"""Which instances a pass compares: the active ones, and the stopped ones a batch at a
time in turn (``_stopped_after``: this process's turn per runtime)."""

from __future__ import annotations

import uuid

from django.db.models import Q

from containers.execution.sync import WATCHED
from containers.models import ContainerInstance, Runtime
from containers.states import Status

#: Stopped instances compared per runtime and pass, besides those the engine lists running.
STOPPED_BATCH = 1000
#: Where each runtime's turn through its stopped instances stands (this process's passes).
_stopped_after: dict[int, uuid.UUID] = {}
# The fields a pass reads to decide whether to look (``instance_sync`` reads the row again).
# What ``running_as_recorded``/``stopped_as_recorded`` read (a deferred field would cost
# a query per instance).
_COMPARED = (
    "id",
    "status",
    "container_id",
    "runtime_node_name",
    "runtime_missing",
    "status_reason",
    "created_at",
)


def _active_rows(runtime: Runtime) -> list[ContainerInstance]:
    """The runtime's watched instances other than ``stopped`` ones, and failed ones with
    a node name to backfill: the status index and the ``instance_failed_unplaced``
    partial index, so the read is bounded by those rows."""
    rows = ContainerInstance.objects.filter(runtime=runtime).filter(
        Q(status__in=WATCHED - {Status.STOPPED})
        | (Q(status=Status.FAILED, runtime_node_name="") & ~Q(container_id=""))
    )
    return list(rows.only(*_COMPARED).order_by("created_at"))


def _has_stopped(runtime: Runtime) -> bool:
    return ContainerInstance.objects.filter(runtime=runtime, status=Status.STOPPED).exists()


def _stopped_rows(
    runtime: Runtime, listed: dict[str, str], *, known, batch: int | None
) -> list[ContainerInstance]:
    """The stopped instances this pass compares.

    1. Those whose container the engine lists running or paused (started outside
       gobrave): looked up by container id among the running containers no active
       instance accounts for (the ``instance_stopped_container`` partial index).
    2. The next ``batch`` after this runtime's turn (by id, over the
       ``instance_stopped_turn`` partial index), wrapping round to the first; the turn
       moves on. With fewer than ``batch`` stopped instances every pass compares all of
       them.
    ``batch`` None: every stopped instance (a pass on demand).
    """
    rows = ContainerInstance.objects.filter(runtime=runtime, status=Status.STOPPED).only(*_COMPARED)
    if batch is None:
        return list(rows.order_by("id"))
    accounted = {i.container_id for i in known}
    awake = [
        cid for cid, st in listed.items() if st in ("running", "paused") and cid not in accounted
    ]
    found = {i.id: i for i in rows.filter(container_id__in=awake)} if awake else {}
    after = _stopped_after.get(runtime.pk)
    turn = list((rows.filter(id__gt=after) if after else rows).order_by("id")[:batch])
    if after and len(turn) < batch:
        turn += rows.filter(id__lte=after).order_by("id")[: batch - len(turn)]
    if turn:
        _stopped_after[runtime.pk] = turn[-1].id
    for instance in turn:
        found.setdefault(instance.id, instance)
    return list(found.values())
