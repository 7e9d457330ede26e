"""Placement under the capacity gate: where a create goes as it leaves ``pending``, and
whether an engine has room for a start (contract §9, per-engine capacity).

The decision itself is ``containers.placement.choice.placement_choose`` (pure); here it
runs where it cannot race, with the engines' usage (``slots.engine_usage``: containers and
slots per engine, one statement) counted while the capacity gate is held:

- the create handler's first step (``create_admit``, the global cap and the placement
  under one hold of the gate): the instance gets its engine, the reason it was chosen,
  and its spec's engine parts (``containers.spec.engine_parts``), saved by its move to
  ``creating``; no engine with room leaves it ``pending`` with the reason, and its
  request deferred;
- a start, or a retry of a create whose container exists (``engine_waits``): its own
  engine, cordoned or not, must be enabled and below ``max_concurrency``;
- a retry of a create whose container never came to exist (``movable``: no container id
  recorded, no DAG run's node): placed again (``instance_place_again``), on its engine
  while that would take it as a new placement, else by the normal rule, its spec's
  engine parts resolved anew (``spec_unplaced``, then ``spec_for_engine``);
- the create queue's claim guard (``claims_within_capacity``): rows that could only go to
  a full (cordoned, unreachable, disabled) engine are not claimed but parked
  (``outbox.services.outbox_park``) until room frees: every exit from a slot, a delete
  accepted (``lifecycle.move``), a runtime changed, uncordoned or reachable again
  (``outbox_release_deferred``), or ``placement_recheck_seconds`` at the latest.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from containers.actors import WORKER
from containers.engines.labels import LABEL_INSTALLATION
from containers.models import ContainerInstance, Runtime
from containers.placement.choice import (
    Placement,
    away_reason,
    engine_closed,
    engine_full,
    labels_match,
    placement_choose,
)
from containers.requests.lifecycle import _in_slots, _is_uuid, lock_gate, record
from containers.requests.slots import EngineUsage, engine_usage, slot_count, slots_by_runtime
from containers.spec.engine_parts import (
    spec_for_engine,
    spec_placed,
    spec_replaceable,
    spec_unplaced,
)
from containers.spec.hardening import owner_ids
from containers.spec.mounts import workspace_for
from containers.states import ACTIVE_SLOTS, Status
from core import prepared
from outbox import conf as outbox_conf
from outbox.services import outbox_park

log = logging.getLogger(__name__)

# What a placement sets on the instance (``create_admit``, saved with its move;
# ``instance_place_again`` saves them itself).
PLACED_FIELDS = ("runtime", "placement_reason", "spec")


def placement_recheck_seconds() -> float:
    """How long a create that waits for room (or a start for its engine) is left before it
    is looked at again if nothing wakes it: ten relay polls (a freed slot, a delete, a
    runtime change wake it at once)."""
    return 10 * float(outbox_conf.value("poll_interval"))


def _runtimes() -> list[Runtime]:
    """Every runtime by name (each placement and each claim of the create queue asks:
    compiled once, a prepared statement on PostgreSQL)."""
    return prepared.objects("placing.runtimes", lambda: Runtime.objects.order_by("name"))


def _restricted(runtime: Runtime) -> bool:
    """The runtime may refuse a placement or a start (a limit, a cordon, a recorded loss)."""
    return (
        runtime.max_containers is not None
        or runtime.max_concurrency is not None
        or runtime.cordoned
        or not runtime.enabled
        or runtime.health == Runtime.Health.UNREACHABLE
    )


def _policy() -> str:
    return settings.GOBRAVE["container"]["placement"]


def movable(instance: Any) -> bool:
    """The instance, placed once, may be placed again by the normal rule: its container
    never came to exist (no container id recorded: its create failed, was deferred or
    its worker died before the engine made it), it is no DAG run's node (``pinned``),
    and its spec's engine parts can be resolved again (``spec_replaceable``: placed
    since the marks are kept). Once its container exists an instance keeps its engine
    for life."""
    info = instance.spec.get("placement") or {}
    return (
        instance.status == Status.CREATING
        and instance.runtime_id is not None
        and not instance.container_id
        and not info.get("pinned")
        and spec_replaceable(instance.spec)
    )


def _choose(instance: Any, runtimes: list[Runtime], usage):
    """``placement_choose`` for ``instance``: pinned to its engine when it has one (a DAG
    run's node, or a create accepted before placement moved to the pending exit), else
    the normal rule from the constraints stored with the request."""
    info = instance.spec.get("placement") or {}
    pinned = None
    if instance.runtime_id is not None:
        pinned = next((r for r in runtimes if r.pk == instance.runtime_id), None)
    return placement_choose(
        runtimes=runtimes,
        usage=usage,
        constraints=info.get("constraints") or {},
        local_only=bool(info.get("local_only")),
        pinned=pinned,
        policy=_policy(),
    )


def _without(usage: dict[int, EngineUsage], runtime_id: int, *, slot: bool) -> dict:
    """``usage`` less one instance's own place (and slot) on ``runtime_id``."""
    held = usage.get(runtime_id)
    if held is None:
        return usage
    less = EngineUsage(max(0, held.containers - 1), max(0, held.slots - (1 if slot else 0)))
    return {**usage, runtime_id: less}


def _choose_again(instance: Any, runtimes: list[Runtime], usage, *, slot: bool) -> Placement:
    """Where a ``movable`` instance goes now (its own place, and its slot if ``usage``
    counts one, ``slot``, not counted on its engine): its engine while it would take it
    as a new placement (enabled, uncordoned, reachable, with room), else the normal rule
    over every engine (``placement_choose``)."""
    info = instance.spec.get("placement") or {}
    counted = _without(usage(), instance.runtime_id, slot=slot)
    home = next((r for r in runtimes if r.pk == instance.runtime_id), None)
    if (
        home is not None
        and not engine_closed(home, pinned=False)
        and labels_match(home, info.get("constraints") or {})
        and not engine_full(home, counted.get(home.pk))
    ):
        return Placement(home, "")
    return placement_choose(
        runtimes=runtimes,
        usage=lambda: counted,
        constraints=info.get("constraints") or {},
        local_only=bool(info.get("local_only")),
        pinned=None,
        policy=_policy(),
    )


def _waiting(instance: ContainerInstance, reason: str, *, prefix: str = "waiting: ") -> str:
    reason = f"{prefix}{reason}"[:1000]
    if instance.status_reason != reason:
        instance.status_reason = reason
        instance.save(update_fields=["status_reason"])
    return reason


def _reason_clear(instance: ContainerInstance) -> str:
    """A create's retry that waited goes on where it is: why it waited is over. ''."""
    if instance.status_reason:
        instance.status_reason = ""
        instance.save(update_fields=["status_reason"])
    return ""


def _again_waits(instance: Any, placement: Placement, runtimes: list[Runtime]) -> str:
    """Why a ``movable`` instance that no engine takes waits, in full. When its own engine
    is recorded unreachable, that comes first, as every instance there says it
    (``away_reason``: the engine's own words; the reconciler clears it when the engine
    answers), followed by the other engines' state if any other could take it."""
    home = next((r for r in runtimes if r.pk == instance.runtime_id), None)
    if home is None or home.health != Runtime.Health.UNREACHABLE:
        return f"waiting: {placement.reason}"
    constraints = (instance.spec.get("placement") or {}).get("constraints") or {}
    others = any(r.pk != home.pk and r.enabled and labels_match(r, constraints) for r in runtimes)
    return away_reason(home) + (f"; {placement.reason}" if others else "")


def _resolve_for(instance: ContainerInstance, runtime: Runtime) -> None:
    """Resolve the spec's engine parts for ``runtime`` (``spec_for_engine``) on a spec
    not placed yet: the owner's workspace there, with the uid and gid stored with the
    request."""
    security = settings.GOBRAVE["container"]["security"]
    stored = instance.spec.get("workspace") or {}
    uid, gid = stored.get("uid"), stored.get("gid")
    if uid is None:
        uid, gid = owner_ids(instance.owner_id, security)
    workspace = workspace_for(
        runtime=runtime,
        owner_id=instance.owner_id,
        uid=uid,
        gid=gid,
        installation=instance.spec["labels"][LABEL_INSTALLATION],
    )
    instance.spec = spec_for_engine(instance.spec, runtime_name=runtime.name, workspace=workspace)


def create_admit(instance: ContainerInstance) -> str | None:
    """A fresh create's pass through the capacity gate as it leaves ``pending``: None when
    no create/start slot is free (the global cap), '' when it takes one and is placed,
    else the reason it waits for an engine with room (set on the instance as
    ``status_reason``).

    The caller holds the instance's row lock and, when placed, moves it to ``creating``
    with ``PLACED_FIELDS`` in the same statement (``lifecycle.move(saved=...)``), in this
    transaction, which holds the gate until it commits: every earlier holder committed,
    so the counts here are exact and two creates never take the last slot, nor one
    engine's last place. The gate is held for as few statements as the decision needs
    (creates at once queue on it: ``docs/benchmarks.md`` section 12):
    1. Before the gate: the runtimes (a runtime's change takes no gate, so reading them
       under it would guard nothing).
    2. Take the gate and choose (``placement_choose``: constraints, then room, then the
       ``container.placement`` policy); the engines' usage is counted only when the choice
       depends on it (a capacity, or several engines open): the slots per engine and the
       instance tally, a prepared statement each.
    3. The global cap, from that same count of slots (summed) when it was taken, else
       from one count of every slot: none free, None (nothing written).
    4. No engine with room: say why on the instance and return it.
    5. Else set the engine, why it was chosen, and the spec's engine parts for it on the
       instance (not saved: the caller's move writes them).
    """
    runtimes = _runtimes()
    lock_gate("capacity")
    counted: list[dict[int | None, int]] = []

    def usage() -> dict[int, EngineUsage]:
        counted.append(slots_by_runtime())
        return engine_usage(slots=counted[-1])

    placement = _choose(instance, runtimes, usage)
    held = sum(counted[-1].values()) if counted else slot_count()
    if held >= settings.GOBRAVE["container"]["create_queue_max_concurrency"]:
        return None
    runtime = placement.runtime
    if runtime is None:
        return _waiting(instance, placement.reason)
    pinned = instance.runtime_id is not None
    if not spec_placed(instance.spec):
        _resolve_for(instance, runtime)
        if pinned:
            instance.spec["placement"]["pinned"] = True
    instance.runtime = runtime
    instance.placement_reason = placement.reason[:255]
    return ""


def instance_place_again(instance: ContainerInstance) -> str:
    """Place again a ``creating`` instance whose container never came to exist
    (``movable``), as its create's retry takes its slot; '' when it may go (on its
    engine or another), else the reason it waits (set as ``status_reason``).

    The caller holds the instance's row lock and the capacity gate, as for
    ``create_admit``.
    1. Its engine keeps it while that engine would take it as a new placement
       (``_choose_again``): nothing changes but its ``status_reason``, cleared (whatever
       it waited for is over).
    2. Else the normal rule: constraints, room, policy; its own place is not counted.
       None with room: it waits, saying why (still ``creating``, holding no slot).
    3. Else the spec's stand-ins are put back (``spec_unplaced``) and resolved for the
       new engine, which is recorded with why (its ``status_reason`` cleared), and the
       history says it moved.
    """
    runtimes = _runtimes()
    home = instance.runtime
    # Its request is claimed under a live lease: ``engine_usage`` counts its slot.
    placement = _choose_again(instance, runtimes, engine_usage, slot=True)
    runtime = placement.runtime
    if runtime is None:
        return _waiting(instance, _again_waits(instance, placement, runtimes), prefix="")
    if runtime.pk == home.pk:
        return _reason_clear(instance)
    unplaced = spec_unplaced(instance.spec)
    if unplaced is None:  # its spec was changed since: it stays, as a start would
        if home.health == Runtime.Health.UNREACHABLE:
            return _waiting(instance, away_reason(home), prefix="")
        return engine_waits(instance) or _reason_clear(instance)
    left = _why_not(home, runtimes, instance.spec)
    instance.spec = unplaced
    _resolve_for(instance, runtime)
    instance.runtime = runtime
    instance.placement_reason = placement.reason[:255]
    instance.status_reason = ""  # why it waited, if it did, is over
    prepared.update(instance, (*PLACED_FIELDS, "status_reason"))
    record(
        instance,
        kind="placement",
        actor=WORKER,
        from_status=instance.status,
        to_status=instance.status,
        message=(
            f"placed again on {runtime.name} ({placement.reason}): its container never came"
            f" to exist on {home.name}, which takes no placement now ({left})"
        )[:2000],
    )
    log.info(
        "instance %s %s placed again: %s -> %s (%s)",
        instance.id,
        instance.status,
        home.name,
        runtime.name,
        left,
    )
    return ""


def _why_not(home: Runtime, runtimes: list[Runtime], spec: dict[str, Any]) -> str:
    """Why ``home`` (as ``_runtimes`` read it) takes no new placement, in a few words."""
    current = next((r for r in runtimes if r.pk == home.pk), home)
    constraints = (spec.get("placement") or {}).get("constraints") or {}
    if closed := engine_closed(current, pinned=False):
        return closed
    if not labels_match(current, constraints):
        return f"{current.name} no longer matches the constraints"
    return f"{current.name} full"


def _engine_refusal(runtime: Runtime, slots: int) -> str:
    """Why ``runtime`` takes no further slot of an instance already there ('')."""
    if not runtime.enabled:
        return f"engine of runtime {runtime.name} is disabled"
    if runtime.max_concurrency is not None and slots >= runtime.max_concurrency:
        return f"engine of runtime {runtime.name} is full (slots {slots}/{runtime.max_concurrency})"
    return ""


def engine_waits(instance: ContainerInstance) -> str:
    """Why an instance placed earlier (a start, a create's retry) may not take a slot on
    its engine now ('' when it may), set on the instance as ``status_reason``.

    A start is no placement: it goes back to its engine, cordoned or not, and waits while
    that engine is disabled or has ``max_concurrency`` slots held (this instance's own
    slot not counted, for a retry). The caller holds the instance's lock and the gate.
    """
    runtime = instance.runtime
    if runtime is None or not _restricted(runtime):
        return ""
    held = engine_usage().get(runtime.pk)
    slots = held.slots if held else 0
    if instance.status in ACTIVE_SLOTS:
        slots -= 1  # its own live claim counts it
    refusal = _engine_refusal(runtime, slots)
    return _waiting(instance, refusal) if refusal else ""


@dataclass(frozen=True)
class _Claimed:
    status: str
    runtime_id: int | None
    placement: dict[str, Any] | None
    owner_id: int
    container_id: str

    @property
    def spec(self) -> dict[str, Any]:  # what ``_choose`` reads
        return {"placement": self.placement}


def _claim_states(ids: list[str]) -> dict[str, _Claimed]:
    rows = ContainerInstance.objects.filter(id__in=[uuid.UUID(each) for each in ids]).values_list(
        "id", "status", "runtime_id", "spec__placement", "owner_id", "container_id"
    )
    return {str(pk): _Claimed(*rest) for pk, *rest in rows}


def claims_within_capacity(rows: Sequence[tuple[int, str]]) -> list[int]:
    """The create queue's claim guard (``outbox.registry.register_claim_guard``): which of
    the rows a claim selected it may take now (contract §4 and §9).

    1. No runtime limited, cordoned, disabled or unreachable (the usual case): a fresh
       create or start takes no slot when claimed (its handler passes the gate) and
       goes; a row whose instance is already ``creating``/``starting`` (a retry, a lease
       reclaimed) becomes a slot the moment it is claimed: under the capacity gate, the
       first ``cap - slots`` of them go, in claim order; the rest are held back, still due.
    2. Else, under the gate, every row of an instance is also judged against the engines,
       in claim order, with what the rows let go before it counted: a fresh create goes
       if some engine would take it now (``placement_choose``), a start or a retry if its
       own engine has a slot free (a retry of a create whose container never came to
       exist: some engine, ``movable``); the others are parked (``outbox_park``: not
       claimed, their turn kept; a row whose lease ran out goes back to ``pending``, its
       lapsed claim counted as a reclaim counts it) until room frees, so they no longer
       fill the claim's window on every poll. Each parked request says why on its
       instance (rows another transaction holds are skipped: no lock is waited for).
    Lock order: the claim's rows, then the gate; no holder of the gate waits on an outbox
    row lock, so there is no cycle.
    """
    ids = [aggregate for _, aggregate in rows if _is_uuid(aggregate)]
    if not ids:
        return [row_id for row_id, _ in rows]
    runtimes = _runtimes()
    cap = settings.GOBRAVE["container"]["create_queue_max_concurrency"]
    if not any(_restricted(runtime) for runtime in runtimes):
        active = _in_slots(ids)
        if not active:
            return [row_id for row_id, _ in rows]
        lock_gate("capacity")
        room = cap - slot_count()
        allowed = []
        for row_id, aggregate in rows:
            if aggregate in active:
                if room <= 0:
                    continue
                room -= 1
            allowed.append(row_id)
        return allowed
    states = _claim_states(ids)
    lock_gate("capacity")
    room = cap - slot_count()
    usage = {pk: [used.containers, used.slots] for pk, used in engine_usage().items()}
    by_id = {runtime.pk: runtime for runtime in runtimes}
    allowed: list[int] = []
    parked: list[int] = []
    reasons: dict[str, str] = {}
    for row_id, aggregate in rows:
        state = states.get(aggregate)
        if state is None or state.status not in (
            Status.PENDING,
            Status.START_PENDING,
            *ACTIVE_SLOTS,
        ):
            allowed.append(row_id)  # its handler finds it moved on (superseded)
            continue
        if state.status == Status.PENDING:
            counted = {pk: EngineUsage(*each) for pk, each in usage.items()}
            placement = _choose(state, runtimes, lambda counted=counted: counted)
            if placement.runtime is None:
                parked.append(row_id)
                reasons[aggregate] = f"waiting: {placement.reason}"[:1000]
                continue
            target = placement.runtime.pk
            usage.setdefault(target, [0, 0])[0] += 1
        elif movable(state):
            counted = {pk: EngineUsage(*each) for pk, each in usage.items()}
            # Waiting (pending, or a lease run out), its request holds no slot.
            placement = _choose_again(state, runtimes, lambda c=counted: c, slot=False)
            if placement.runtime is None:
                parked.append(row_id)
                reasons[aggregate] = _again_waits(state, placement, runtimes)[:1000]
                continue
            if room <= 0:
                continue  # the global cap: held back, still due (and still at home)
            room -= 1
            target = placement.runtime.pk
            if target != state.runtime_id:
                usage.setdefault(target, [0, 0])[0] += 1
                usage.setdefault(state.runtime_id, [0, 0])[0] -= 1
        else:
            target = state.runtime_id
            runtime = by_id.get(target)
            held = usage.get(target, [0, 0])[1]
            refusal = _engine_refusal(runtime, held) if runtime is not None else ""
            if refusal:
                parked.append(row_id)
                reasons[aggregate] = f"waiting: {refusal}"[:1000]
                continue
            if state.status in ACTIVE_SLOTS:
                if room <= 0:
                    continue  # the global cap: held back, still due
                room -= 1
        usage.setdefault(target, [0, 0])[1] += 1
        allowed.append(row_id)
    if parked:
        outbox_park(ids=parked, delay=placement_recheck_seconds())
        _reasons_show(reasons)
    return allowed


def _reasons_show(reasons: dict[str, str]) -> None:
    """Say on each parked request's instance why it waits, where it changed; a row another
    transaction holds is skipped (its holder is placing it or moving it on). One UPDATE
    per distinct reason (parked rows mostly share one: "no engine with room: ..."), not
    one per row."""
    waiting = [Status.PENDING, Status.START_PENDING, *sorted(ACTIVE_SLOTS)]
    by_reason: dict[str, list[str]] = {}
    for instance_id, reason in reasons.items():
        by_reason.setdefault(reason, []).append(instance_id)
    for reason, ids in by_reason.items():
        free = (
            ContainerInstance.objects.filter(id__in=ids, status__in=waiting)
            .exclude(status_reason=reason)
            .select_for_update(skip_locked=True)
            .values("id")
        )
        ContainerInstance.objects.filter(id__in=free).update(status_reason=reason)
