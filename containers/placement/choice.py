"""Which enabled runtime (engine) an instance, or a DAG run's nodes, goes to.

Reads only: the enabled runtimes, their labels, cordon flag, cached health and capacity;
no engine is asked and no row is locked here.

A create is placed when it leaves ``pending`` and takes its slot, not when it is accepted
(``containers.requests.placing``, under the capacity gate, with the engines' usage counted
there): ``placement_choose`` is that decision. At accept time ``runtimes_matching`` only
refuses a create that no enabled engine's labels could ever match (``NoMatchingRuntime``);
a DAG run chooses its one engine when it starts (``runtime_select``) and its nodes are
pinned to it.

The decision (``placement_choose``):
1. The candidates: the pinned engine if there is one (a DAG run's; cordoned or not), else
   every enabled runtime whose labels satisfy the stored constraints (and that is on this
   host, for a spec with an operator's bind mount).
2. A candidate takes no new placement while it is disabled, cordoned (unless pinned),
   recorded unreachable, or full: ``max_containers`` instances placed there, or
   ``max_concurrency`` slots held there.
3. Among those with room, the policy (``container.placement``): ``spread`` (the default)
   takes the fewest containers relative to capacity (an engine with no ``max_containers``
   counts as large as the largest bounded one, or as 1 when none is bounded: then the
   fewest containers win); ``pack`` fills one engine before the next (the first with room,
   by name).
4. None with room: no runtime, and the reason names each candidate ("no engine with room:
   a (5/5), b cordoned, c unreachable since ...").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Count

from containers.errors import NoMatchingRuntime, RuntimesCordoned
from containers.models import ContainerInstance, Runtime
from containers.spec.resolve import clean_constraints, labels_match
from containers.states import IN_FLIGHT, Status
from core import prepared

SPREAD = "spread"
PACK = "pack"
POLICIES = (SPREAD, PACK)


def _enabled_runtimes() -> list[Runtime]:
    """The enabled runtimes by name (every create asks: compiled once, a prepared
    statement on PostgreSQL)."""
    return prepared.objects(
        "choice.enabled_runtimes", lambda: Runtime.objects.filter(enabled=True).order_by("name")
    )


def constraints_of(templates: Iterable[Any]) -> dict[str, str]:
    """Every template's constraints merged (a DAG run's engine must satisfy them all)."""
    merged: dict[str, str] = {}
    for template in templates:
        merged.update(clean_constraints(template.constraints))
    return merged


def runtimes_matching(
    *, template: Any, templates: list[Any] | None = None, among: list[Runtime] | None = None
) -> list[Runtime]:
    """The enabled runtimes (by name) whose labels satisfy the constraints of ``template``
    and of each of ``templates``; ``among``: only these qualify. Cordon, health and room
    are not looked at (they change; a create waits for them). ``NoMatchingRuntime`` when
    none does: the create is refused at once."""
    every = [template, *(templates or [])]
    wanted = [clean_constraints(each.constraints) for each in every]  # once, not per runtime
    candidates = _enabled_runtimes()
    if among is not None:
        chosen = {r.pk for r in among}
        candidates = [runtime for runtime in candidates if runtime.pk in chosen]
    matching = [r for r in candidates if all(labels_match(r, each) for each in wanted)]
    if not matching:
        constraints = constraints_of(every)
        text = ", ".join(f"{k}={v}" for k, v in constraints.items()) or "(none)"
        names = ", ".join(sorted({str(t.name) for t in every}))
        raise NoMatchingRuntime(
            f"no enabled runtime matches the constraints {text} of template {names}",
            constraints=constraints,
        )
    return matching


def runtime_select(*, template: Any, templates: list[Any] | None = None) -> Runtime:
    """The one engine a DAG run's nodes all go to, chosen when the run starts.

    The enabled runtimes whose labels satisfy every template's constraints
    (``runtimes_matching``; ``NoMatchingRuntime``), less the cordoned ones
    (``RuntimesCordoned`` when every match is), a reachable (or not yet checked) one
    before one recorded unreachable, then the fewest instances under way (one query, only
    when there is a choice).
    """
    matching = runtimes_matching(template=template, templates=templates)
    cordoned = [runtime for runtime in matching if runtime.cordoned]
    if len(cordoned) == len(matching):
        names = ", ".join(runtime.name for runtime in cordoned)
        of = ", ".join(
            sorted({str(getattr(t, "name", "?")) for t in [template, *(templates or [])]})
        )
        raise RuntimesCordoned(
            f"every runtime that matches template {of} is cordoned: {names};"
            " an operator must uncordon one (or add an engine) first",
            cordoned=[runtime.name for runtime in cordoned],
        )
    matching = [runtime for runtime in matching if not runtime.cordoned]
    if len(matching) > 1:
        load = dict(
            ContainerInstance.objects.filter(
                runtime__in=matching, status__in=IN_FLIGHT | {Status.RUNNING}
            )
            .order_by()
            .values("runtime")
            .annotate(count=Count("id"))
            .values_list("runtime", "count")
        )
        matching.sort(key=lambda runtime: load.get(runtime.pk, 0))  # stable: then by name
    matching.sort(key=lambda runtime: runtime.health == Runtime.Health.UNREACHABLE)
    return matching[0]


@dataclass(frozen=True)
class Placement:
    """``placement_choose``'s answer: the engine (None: wait) and why, in a line."""

    runtime: Runtime | None
    reason: str


# What an instance on an engine recorded unreachable says (``away_reason``); the reconciler
# clears reasons that start so once the engine answers (``engine_loss``).
UNREACHABLE_SINCE = "engine unreachable since "
REASON_MAX = 1000


def away_reason(runtime: Runtime) -> str:
    """What an instance on ``runtime`` says while its engine is recorded unreachable."""
    why = runtime.last_error or "no answer"
    return f"{UNREACHABLE_SINCE}{_since(runtime)} (runtime {runtime.name}: {why})"[:REASON_MAX]


def _since(runtime: Runtime) -> str:
    return runtime.health_since.isoformat(timespec="seconds") if runtime.health_since else "?"


def engine_closed(runtime: Runtime, *, pinned: bool) -> str:
    """Why ``runtime`` takes no placement whatever its load ('' when it may)."""
    if not runtime.enabled:
        return f"{runtime.name} disabled"
    if runtime.cordoned and not pinned:
        return f"{runtime.name} cordoned"
    if runtime.health == Runtime.Health.UNREACHABLE:
        return f"{runtime.name} unreachable since {_since(runtime)}"
    return ""


def engine_full(runtime: Runtime, used: Any) -> str:
    """Why ``runtime`` has no room for one more container ('' when it has)."""
    containers = used.containers if used else 0
    slots = used.slots if used else 0
    if runtime.max_containers is not None and containers >= runtime.max_containers:
        return f"{runtime.name} ({containers}/{runtime.max_containers})"
    if runtime.max_concurrency is not None and slots >= runtime.max_concurrency:
        return f"{runtime.name} (slots {slots}/{runtime.max_concurrency})"
    return ""


def _bounded(runtime: Runtime) -> bool:
    return runtime.max_containers is not None or runtime.max_concurrency is not None


def _fill(runtime: Runtime, used: Any) -> str:
    containers = used.containers if used else 0
    cap = "" if runtime.max_containers is None else f"/{runtime.max_containers}"
    return f"{runtime.name} {containers}{cap}"


def placement_choose(
    *,
    runtimes: list[Runtime],
    usage: Callable[[], Mapping[int, Any]],
    constraints: Mapping[str, str],
    local_only: bool = False,
    pinned: Runtime | None = None,
    policy: str = SPREAD,
) -> Placement:
    """Where a create goes now, or why it waits (the module docstring's steps).

    ``runtimes``: every runtime (enabled or not) by name; ``usage()``: ``{runtime id: x}``
    with ``x.containers`` and ``x.slots`` (``containers.requests.slots.engine_usage``),
    asked only when the answer depends on it (a candidate with a capacity, or a choice
    between several): one engine with no limits is chosen without counting anything.
    Pure apart from ``usage``, so the caller decides under which lock it runs.
    """
    if pinned is not None:
        candidates = [pinned]
    else:
        candidates = [
            r
            for r in runtimes
            if r.enabled and labels_match(r, constraints) and (r.is_local or not local_only)
        ]
    if not candidates:
        text = ", ".join(f"{k}={v}" for k, v in constraints.items()) or "(none)"
        return Placement(None, f"no enabled engine matches the constraints {text}")
    refused = [engine_closed(r, pinned=pinned is not None) for r in candidates]
    open_ = [r for r, why in zip(candidates, refused, strict=True) if not why]
    if len(open_) == 1 and not _bounded(open_[0]):
        chosen = open_[0]
        if pinned is not None:
            return Placement(chosen, f"pinned: the DAG run's engine, {chosen.name}")
        return Placement(chosen, f"{policy}: {chosen.name}, the only engine with room")
    counted = usage() if open_ else {}
    for index, runtime in enumerate(candidates):
        if not refused[index]:
            refused[index] = engine_full(runtime, counted.get(runtime.pk))
    open_ = [r for r, why in zip(candidates, refused, strict=True) if not why]
    if not open_:
        return Placement(None, "no engine with room: " + ", ".join(refused))
    names = ", ".join(r.name for r in open_)
    if pinned is not None:
        fill = _fill(pinned, counted.get(pinned.pk))
        return Placement(pinned, f"pinned: the DAG run's engine, {fill}")
    if policy == PACK:
        chosen = open_[0]
        fill = _fill(chosen, counted.get(chosen.pk))
        return Placement(chosen, f"pack: {fill}, first with room of {names}")
    bounded = [r.max_containers for r in open_ if r.max_containers is not None]
    scale = max(bounded, default=1)

    def relative(runtime: Runtime) -> float:
        used = counted.get(runtime.pk)
        return (used.containers if used else 0) / (runtime.max_containers or scale)

    chosen = min(open_, key=relative)  # stable: the first by name among equals
    return Placement(
        chosen, f"{SPREAD}: {_fill(chosen, counted.get(chosen.pk))} least loaded of {names}"
    )
