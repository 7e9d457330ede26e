"""What the handlers hand their engine: the instance's spec, the reference to its
container, whether a container under its name is its own, and what must exist before a
create or start (workspace, network, a bind source that passes the check)."""

from __future__ import annotations

import dataclasses
import logging

from containers.engines.base import ContainerSpec, ContainerState, Engine, Mount
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE
from containers.errors import MountRefused
from containers.execution.workspaces import (
    LABEL_OWNER,
    mounts_check,
    shared_volumes_ensure,
    workspace_ensure,
)
from containers.models import ContainerInstance
from outbox.registry import PermanentFailure

log = logging.getLogger(__name__)


_SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(ContainerSpec))


def _spec(instance: ContainerInstance) -> ContainerSpec:
    """The runtime's part of the stored spec (with which env keys are secret)."""
    data = {k: v for k, v in instance.spec.items() if k in _SPEC_FIELDS}
    data["mounts"] = [Mount(**m) for m in data.get("mounts", [])]
    return ContainerSpec(**data)


def _ref(instance: ContainerInstance) -> str:
    return instance.container_id or instance.container_name


def _ours(state: ContainerState | None, instance: ContainerInstance) -> bool:
    """Whether the container an engine holds under the instance's name is the instance's
    (it carries its label): anything else holding the name (a foreign object a create
    refused) is never removed."""
    return state is not None and state.labels.get(LABEL_INSTANCE) == str(instance.id)


def _remove_if_ours(engine: Engine, instance: ContainerInstance, ref: str) -> None:
    """Remove the container ``ref`` names (the instance's deterministic name, when no id
    of the engine's was recorded) only if it is the instance's (``_ours``)."""
    if _ours(engine.inspect(ref), instance):
        engine.remove(ref)


def _prepare(instance: ContainerInstance, engine: Engine) -> None:
    """Before a create or start: the owner's workspace and network exist, and every bind
    source passes the worker's check on this host, now.

    A refused mount is permanent. The relay keeps the whole reason on the outbox row
    (operators: the path and the rule) and hands ``on_dead`` its last line, which is the
    user's text (the template's volume only).
    """
    spec = instance.spec
    workspace_ensure(instance=instance, engine=engine)
    shared_volumes_ensure(instance=instance, engine=engine)
    if spec.get("network_owned"):
        engine.ensure_network(
            spec["network"],
            labels={
                LABEL_INSTALLATION: spec["labels"][LABEL_INSTALLATION],
                LABEL_OWNER: str(instance.owner_id),
            },
        )
    try:
        mounts_check(instance=instance)
    except MountRefused as exc:
        log.warning("%s", exc.operator_message)
        raise PermanentFailure(f"{exc.operator_message}\n{exc.message}") from exc
