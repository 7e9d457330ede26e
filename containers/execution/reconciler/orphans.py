"""Containers with no instance, or given up by theirs: recorded and removed (step 4)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from django.db import IntegrityError, transaction
from django.utils import timezone

from containers.actors import RECONCILER
from containers.engines.base import ContainerState, Engine
from containers.execution.reconciler.config import _config
from containers.execution.reconciler.engines import engine_key
from containers.execution.reconciler.report import ReconcileReport
from containers.execution.sync import instance_label
from containers.models import ContainerEvent, ContainerInstance, OrphanContainer, Runtime
from containers.states import Status

log = logging.getLogger(__name__)

NIL_UUID = uuid.UUID(int=0)


def _orphan_upsert(
    runtime: Runtime, state: ContainerState, *, now: dt.datetime, why: str
) -> tuple[OrphanContainer, bool]:
    """Insert or refresh the orphan row; on insert also record the sighting, once
    (``why``: what makes it an orphan, for the history)."""
    fields = {
        "name": state.name,
        "labels": state.labels,
        "status": state.status,
        "last_seen_at": now,
    }
    updated = OrphanContainer.objects.filter(runtime=runtime, container_id=state.runtime_id)
    if updated.update(**fields):
        return updated.get(), False
    label = instance_label(state)
    try:
        with transaction.atomic():
            orphan = OrphanContainer.objects.create(
                runtime=runtime, container_id=state.runtime_id, first_seen_at=now, **fields
            )
            ContainerEvent.objects.create(
                instance_id=label or NIL_UUID,
                instance_name=state.name[:128],
                kind="orphan",
                actor=RECONCILER,
                message=(
                    f"container {state.name} ({state.runtime_id[:12]}) on {runtime.name} {why}"
                ),
                data={
                    "runtime": runtime.name,
                    "container_id": state.runtime_id,
                    "status": state.status,
                    "labels": state.labels,
                },
            )
    except IntegrityError:  # another reconciler recorded it first
        return OrphanContainer.objects.get(runtime=runtime, container_id=state.runtime_id), False
    log.warning("orphan container %s (%s) on %s", state.name, state.runtime_id[:12], runtime.name)
    return orphan, True


def orphans_scan(
    *, runtime: Runtime, engine: Engine, installation: str, report: ReconcileReport
) -> None:
    """Report (and under ``orphan_policy: remove``, remove) containers with no instance,
    and remove those their instance gave up.

    1. List every container with our installation label (engine call).
    2. Then read which of their instances exist: a container listed before its instance
       was deleted may be reported once, but one made after the read is never mistaken
       for an orphan. An instance ``failed`` and marked missing (its engine was lost,
       ``engine_loss``, or its container was removed outside gobrave) has given its
       container up: that container is an orphan too, removed whatever the policy (the
       instance says its run ended; the run must not go on unseen). So is one whose
       instance is placed on another engine (a create placed again before its container
       here was recorded): removed whatever the policy while it was never started.
    3. Upsert an ``OrphanContainer`` per orphan; the first sighting adds a ``ContainerEvent``
       (kind ``orphan``, the label's instance id or the nil uuid).
    4. Under ``remove`` (or given up), remove it and set ``removed_at``. Rows of orphans
       no longer listed get ``removed_at`` too (someone removed them).
    """
    policy = _config()["orphan_policy"]
    states = engine.list_ours(installation)
    labelled = {s.runtime_id: instance_label(s) for s in states}
    rows = ContainerInstance.objects.filter(
        id__in=[i for i in labelled.values() if i is not None]
    ).values_list("id", "status", "runtime_missing", "runtime__driver", "runtime__base_url")
    here = engine_key(runtime)
    given_up, elsewhere, known = set(), set(), set()
    for pk, status, missing, driver, url in rows:  # one read of them all
        if status == Status.FAILED and missing:
            given_up.add(pk)
        elif driver is not None and (driver, url) != here:
            elsewhere.add(pk)
        else:
            known.add(pk)
    now = timezone.now()
    listed = []
    for state in states:
        owner = labelled[state.runtime_id]
        if owner in known:
            continue
        listed.append(state.runtime_id)
        gave_up = owner in given_up
        # Left by a create placed again on another engine before this container was
        # recorded: never started by gobrave, so nothing of the user's ran in it.
        left = owner in elsewhere and state.status == "created"
        if gave_up:
            why = f"belongs to instance {owner}, which gave it up (failed, marked missing): removed"
        elif owner in elsewhere:
            why = f"belongs to instance {owner}, placed on another engine since" + (
                ": never started, removed" if left else f" (orphan_policy {policy})"
            )
        else:
            why = f"carries our labels but has no instance (orphan_policy {policy})"
        orphan, new = _orphan_upsert(runtime, state, now=now, why=why)
        report.orphans_new += new
        if policy == "remove" or gave_up or left:
            engine.remove(state.runtime_id)
            OrphanContainer.objects.filter(pk=orphan.pk).update(removed_at=now)
            report.orphans_removed += 1
            log.warning("removed orphan container %s (%s)", state.name, state.runtime_id[:12])
    OrphanContainer.objects.filter(runtime=runtime, removed_at__isnull=True).exclude(
        container_id__in=listed
    ).update(removed_at=now)
