"""Engine housekeeping other apps ask for: leftover containers and gobrave's volumes.

These call the engine, so they run outside any transaction, and are idempotent.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from containers.engines import engine_for
from containers.engines.labels import LABEL_INSTANCE
from containers.installation import installation_id
from containers.models import ContainerEvent, ContainerInstance, Runtime, Workspace

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
        ContainerEvent.objects.create(
            instance_id=ids[state.runtime_id] or uuid.UUID(int=0),
            instance_name=state.name[:128],
            kind="cleanup",
            actor=actor,
            message=f"removed leftover container {state.name} ({state.runtime_id[:12]})",
            data={"labels": state.labels, "runtime": runtime.name},
        )
        log.info("removed leftover container %s for %s", state.name, actor)
    return removed


def volume_remove(*, runtime: Runtime, name: str) -> None:
    """Remove a named volume gobrave made (idempotent). Must run outside a transaction.

    Its ``Workspace`` row goes first: a crash in between leaves a volume that the next
    create makes again (``shared_volumes_ensure``), never a row for a missing volume.
    """
    Workspace.objects.filter(runtime=runtime, source=name).delete()
    engine_for(runtime).remove_volume(name)
