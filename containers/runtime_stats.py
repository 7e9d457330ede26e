"""Whether a runtime's engine gives CPU figures (``Engine.stats``), which the idle_timeout
rule needs: asked of the engine and stored on the row (``Runtime.serves_stats``), so that
the validation of a template's ``idle_timeout`` (``containers.spec.policies``) reads a row,
never an engine.

Only drivers whose engines differ are asked (the declared capability ``cpu_discovered``:
a Kubernetes cluster serves ``metrics.k8s.io`` or not); for the others the driver's
``reports_cpu`` is the answer. A runtime is asked when it is saved through the fleet
services (``containers.fleet.runtimes``: created or changed) and each time it is checked
(``containers.execution.health.runtime_health_check``: its admin page).
"""

from __future__ import annotations

import logging

from containers.engines import driver_class, engine_for
from containers.engines.calls import ENGINE_CALL_SECONDS, bounded_call
from containers.models import Runtime

log = logging.getLogger(__name__)


def runtime_stats_check(*, runtime_id: int, seconds: float = ENGINE_CALL_SECONDS) -> bool | None:
    """Ask the runtime's engine now whether it gives CPU figures (``Engine.stats_served``,
    at most ``seconds``) and store the answer on its row; return it.

    A driver that is not ``cpu_discovered`` is not asked: its ``reports_cpu`` is returned
    and nothing is written. None, and the row keeps its last answer, when the engine did
    not answer (or the row is gone). One UPDATE when the answer changed, none otherwise;
    idempotent. Must run outside a transaction (it waits on the engine)."""
    runtime = Runtime.objects.filter(pk=runtime_id).first()
    if runtime is None:
        return None
    engine_class = driver_class(runtime.driver)
    if not getattr(engine_class, "cpu_discovered", False):
        return bool(getattr(engine_class, "reports_cpu", False))
    served, problem = bounded_call(
        lambda: engine_for(runtime).stats_served(timeout=seconds), seconds=seconds
    )
    if problem or served is None:
        log.info("runtime %s: whether it reports CPU is unknown (%s)", runtime.name, problem)
        return None
    changed = (
        Runtime.objects.filter(pk=runtime_id)
        .exclude(serves_stats=served)
        .update(serves_stats=served)
    )
    if changed:
        log.info(
            "runtime %s: serves_stats %s -> %s%s",
            runtime.name,
            runtime.serves_stats,
            served,
            "" if served else " (no CPU figures: idle_timeout is refused on it)",
        )
    return bool(served)
