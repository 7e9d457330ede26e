"""Which enabled runtime an instance (or a DAG run's nodes) is placed on.

Reads only: the enabled runtimes, their labels, cordon flag and cached health, and the
number of instances under way on each; no engine is asked and no row is locked.

A cordoned runtime takes no new placement: a new create or a new DAG run never lands on
it. What was placed there before the cordon stays there (a start of an existing
instance is no placement, and a DAG run's later nodes follow the run's engine: the
create pins it with ``include_cordoned``). Placement happens when a create is accepted,
so a create whose only possible engines are cordoned is refused (``RuntimesCordoned``,
409) rather than left waiting.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count

from containers.engines import driver_class
from containers.errors import NoMatchingRuntime, RuntimesCordoned
from containers.models import ContainerInstance, Runtime
from containers.spec.resolve import NODE_CONSTRAINT_PREFIX, clean_constraints
from containers.states import IN_FLIGHT, Status
from core import prepared


def _enabled_runtimes() -> list[Runtime]:
    """The enabled runtimes by name (every create asks: compiled once, a prepared
    statement on PostgreSQL)."""
    return prepared.objects(
        "choice.enabled_runtimes", lambda: Runtime.objects.filter(enabled=True).order_by("name")
    )


def runtime_select(
    *,
    template: Any,
    templates: list[Any] | None = None,
    among: list[Runtime] | None = None,
    include_cordoned: bool = False,
) -> Runtime:
    """The enabled runtime whose labels satisfy the template's constraints.

    ``templates`` (besides ``template``): the runtime must satisfy all of theirs too (a
    DAG run puts every node on one engine). ``among``: only these runtimes qualify.
    Cordoned runtimes are skipped unless ``include_cordoned`` (a create pinned to the
    engine its DAG run was placed on); when every match is cordoned the request is
    refused with ``RuntimesCordoned`` naming them. Among several matches, a reachable
    (or not yet checked) one before one recorded unreachable, then the one with the
    fewest instances under way. The load is counted only when there is a choice (one
    query; none for the usual single engine).
    """
    every = [template, *(templates or [])]
    wanted = [clean_constraints(each.constraints) for each in every]  # once, not per runtime
    constraints: dict[str, str] = {}
    for each in wanted:
        constraints.update(each)
    candidates = _enabled_runtimes()
    if among is not None:
        chosen = {r.pk for r in among}
        candidates = [runtime for runtime in candidates if runtime.pk in chosen]
    # ``node.`` constraints are the cluster's to match (a nodeSelector), not labels: only
    # a driver that honours them takes the template (a Docker engine cannot).
    on_nodes = any(k.startswith(NODE_CONSTRAINT_PREFIX) for each in wanted for k in each)
    matching = [
        runtime
        for runtime in candidates
        if all(
            str(runtime.labels.get(k)) == v
            for each in wanted
            for k, v in each.items()
            if not k.startswith(NODE_CONSTRAINT_PREFIX)
        )
        and (not on_nodes or driver_class(runtime.driver).honours_node_constraints)
    ]
    cordoned = [runtime for runtime in matching if runtime.cordoned and not include_cordoned]
    if cordoned and len(cordoned) == len(matching):
        names = ", ".join(runtime.name for runtime in cordoned)
        of = ", ".join(sorted({str(getattr(t, "name", "?")) for t in every}))
        raise RuntimesCordoned(
            f"every runtime that matches template {of} is cordoned: {names};"
            " an operator must uncordon one (or add an engine) first",
            cordoned=[runtime.name for runtime in cordoned],
        )
    if cordoned:
        matching = [runtime for runtime in matching if runtime not in cordoned]
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
    # An engine recorded unreachable comes last: a create goes to one that answers if
    # any matches, else it is accepted all the same and waits (``handlers._engine_away``).
    matching.sort(key=lambda runtime: runtime.health == Runtime.Health.UNREACHABLE)
    if not matching:
        wanted = ", ".join(f"{k}={v}" for k, v in constraints.items()) or "(none)"
        names = ", ".join(sorted({str(t.name) for t in every}))
        raise NoMatchingRuntime(
            f"no enabled runtime matches the constraints {wanted} of template {names}",
            constraints=constraints,
        )
    return matching[0]
