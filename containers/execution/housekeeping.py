"""Engine housekeeping other apps ask for: leftover containers and gobrave's volumes;
and the retention of deleted instances' history (no engine call).

These run outside any transaction, and are idempotent.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Mapping

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.db.models.functions import Now
from django.utils import timezone

from containers.engines import engine_for
from containers.engines.calls import bounded_call
from containers.engines.labels import LABEL_INSTANCE
from containers.errors import EngineUnavailable, WorkspaceInUse
from containers.installation import installation_id
from containers.models import (
    ContainerEvent,
    ContainerInstance,
    OrphanContainer,
    Runtime,
    RuntimeEvent,
    Workspace,
)
from core.batches import delete_in_batches
from core.retention import retention_age

log = logging.getLogger(__name__)


def containers_remove_unowned(
    *, runtime: Runtime, labels: Mapping[str, str], actor: str
) -> list[str]:
    """Remove this installation's containers that carry every one of ``labels`` but
    belong to no instance gobrave still has (a crash's leftovers, an earlier attempt's).

    Must run outside a transaction (engine calls). A container whose instance exists is
    never touched. Each removal is recorded in the history under the label's instance
    id. Returns the names removed.
    """
    engine = engine_for(runtime)
    states = engine.list_ours(installation_id(), labels=dict(labels))
    ids: dict[str, uuid.UUID | None] = {}
    for state in states:
        try:
            ids[state.runtime_id] = uuid.UUID(state.labels.get(LABEL_INSTANCE, ""))
        except ValueError:
            ids[state.runtime_id] = None
    live = set(
        ContainerInstance.objects.filter(
            id__in=[i for i in ids.values() if i is not None]
        ).values_list("id", flat=True)
    )
    removed = []
    for state in states:
        if ids[state.runtime_id] in live:
            continue
        engine.remove(state.runtime_id)
        removed.append(state.name)
        _cleanup_recorded(
            name=state.name, labels=state.labels, runtime=runtime, actor=actor,
            message=f"removed leftover container {state.name} ({state.runtime_id[:12]})",
        )  # fmt: skip
        log.info("removed leftover container %s for %s", state.name, actor)
    return removed


def volume_remove(*, runtime: Runtime, name: str) -> None:
    """Remove a named volume gobrave made (idempotent). Must run outside a transaction.

    Its ``Workspace`` row goes first: a crash in between leaves a volume that the next
    create makes again (``shared_volumes_ensure``), never a row for a missing volume.
    """
    Workspace.objects.filter(runtime=runtime, source=name).delete()
    engine_for(runtime).remove_volume(name)


def workspace_remove(*, workspace_id: int, actor: str) -> None:
    """Remove an owner's workspace volume from its engine, at an operator's request, when
    the owner has no instances left; ``WorkspaceInUse`` (nothing changed) otherwise.

    1. In one transaction, lock the row, refuse a directory workspace (its files belong
       to the owner's uid on the host: remove it there) and refuse while the owner has
       any instance (in any state), then delete the row. A row already gone is fine
       (idempotent).
    2. After the commit, ask the engine to remove the volume, bounded in time. Should it
       fail, the row is put back (the page lists it again) and ``EngineUnavailable`` says
       why. The row goes first for the reason ``volume_remove`` gives.
    3. Record a ``cleanup`` entry in the history.
    A create admitted for the owner after step 1 makes the workspace again before its
    container starts (``workspace_ensure``): the owner starts with an empty one.
    Must run outside a transaction (engine call).
    """
    with transaction.atomic():
        row = (
            Workspace.objects.select_for_update()
            .select_related("runtime", "owner")
            .filter(pk=workspace_id)
            .first()
        )
        if row is None:
            return
        owner = row.owner.get_username()
        if row.kind != Runtime.WorkspaceDriver.VOLUME:
            raise WorkspaceInUse(
                f"{row.source} is a directory on the host: remove it there", owner=owner
            )
        left = ContainerInstance.objects.filter(owner_id=row.owner_id).count()
        if left:
            raise WorkspaceInUse(
                f"{owner} still has {left} instance{'s' if left != 1 else ''}: delete them first",
                owner=owner,
                instances=left,
            )
        kept = {f.attname: getattr(row, f.attname) for f in Workspace._meta.concrete_fields}
        row.delete()
    runtime = row.runtime
    _, reason = bounded_call(lambda: engine_for(runtime).remove_volume(kept["source"]))
    if reason:
        Workspace.objects.get_or_create(
            runtime_id=kept["runtime_id"], owner_id=kept["owner_id"], source=kept["source"],
            defaults=kept,
        )  # fmt: skip
        raise EngineUnavailable(f"{kept['source']} on {runtime.name}: {reason}")
    _cleanup_recorded(
        name=kept["source"], labels={}, runtime=runtime, actor=actor,
        message=f"removed the workspace {kept['source']} of {owner} on {runtime.name}",
    )  # fmt: skip
    log.warning("workspace %s of %s removed by %s", kept["source"], owner, actor)


def _cleanup_recorded(
    *, name: str, labels: Mapping[str, str], runtime: Runtime, actor: str, message: str
) -> None:
    """A ``cleanup`` entry in the history of the instance the container's label names (the
    nil uuid when it names none)."""
    try:
        instance_id = uuid.UUID(labels.get(LABEL_INSTANCE, ""))
    except ValueError:
        instance_id = uuid.UUID(int=0)
    ContainerEvent.objects.create(
        instance_id=instance_id,
        instance_name=name[:128],
        kind="cleanup",
        actor=actor,
        message=message,
        data={"labels": dict(labels), "runtime": runtime.name},
    )


def orphan_remove(*, orphan: OrphanContainer, actor: str) -> OrphanContainer:
    """Remove an orphan container from its engine at an operator's request.

    1. An orphan already marked removed is returned as it is (idempotent).
    2. Ask the engine to force-remove it, bounded in time (``bounded_call``); a refusal
       or a silent engine raises ``EngineUnavailable`` and changes nothing.
    3. Set ``removed_at`` and record a ``cleanup`` event under the label's instance id.
    Must run outside a transaction (engine call); takes no lock: a reconciler that marks
    the same row removed meanwhile only moves ``removed_at``.
    """
    if orphan.removed_at is not None:
        return orphan
    runtime, container_id = orphan.runtime, orphan.container_id
    _, reason = bounded_call(lambda: engine_for(runtime).remove(container_id))
    if reason:
        raise EngineUnavailable(f"{orphan.name} on {runtime.name}: {reason}")
    orphan.removed_at = timezone.now()
    OrphanContainer.objects.filter(pk=orphan.pk).update(removed_at=orphan.removed_at)
    _cleanup_recorded(
        name=orphan.name, labels=orphan.labels, runtime=runtime, actor=actor,
        message=f"removed orphan container {orphan.name} ({container_id[:12]}) on {runtime.name}",
    )  # fmt: skip
    log.warning("orphan container %s removed by %s", orphan.name, actor)
    return orphan


def history_purge(batch: int, *, older_than: dt.timedelta | None = None) -> int:
    """Delete the history entries older than ``retention.deleted_instance_history`` of
    instances that no longer exist (and of no instance: orphans, leftovers); returns how
    many went. Off (0) while the key is empty, the default: the audit trail is kept.

    ``batch`` entries per statement in id order (``core.batches.delete_in_batches``),
    each its own commit; an entry of an instance that still exists is never deleted,
    however old (the instance's page shows its whole history).
    """
    age = older_than or retention_age("deleted_instance_history")
    if age is None:
        return 0
    alive = ContainerInstance.objects.filter(id=OuterRef("instance_id"))
    old = ContainerEvent.objects.filter(created_at__lt=Now() - age).filter(~Exists(alive))
    return delete_in_batches(old, batch=batch)


def engine_history_purge(batch: int) -> int:
    """Delete the engines' history entries (``RuntimeEvent``) older than
    ``retention.engine_history``; returns how many went. Off (0) while the key is empty,
    the default: the audit trail is kept. ``batch`` entries per statement, each its own
    commit (a few rows a day per engine: no index of its own)."""
    age = retention_age("engine_history")
    if age is None:
        return 0
    return delete_in_batches(RuntimeEvent.objects.filter(created_at__lt=Now() - age), batch=batch)
