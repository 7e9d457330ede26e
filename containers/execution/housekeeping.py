"""Engine housekeeping other apps ask for: leftover containers and gobrave's volumes.

These call the engine, so they run outside any transaction, and are idempotent.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from django.utils import timezone

from containers.engines import engine_for
from containers.engines.calls import bounded_call
from containers.engines.labels import LABEL_INSTANCE
from containers.errors import EngineUnavailable
from containers.installation import installation_id
from containers.models import ContainerEvent, ContainerInstance, OrphanContainer, Runtime, Workspace

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
