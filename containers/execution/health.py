"""The engine health record on each ``Runtime`` row: written here, read by every page.

A page (the runtime changelist, the API) shows ``Runtime.health`` and friends and never
asks an engine. The record is refreshed by:

- the monitor's heartbeat, every ``engine_ping_interval`` (``containers.execution.heartbeat``:
  a ping of every engine, bounded by ``engine_ping_timeout``);
- the reconciler, once per pass and runtime (every ``reconcile_interval`` in the monitor,
  or ``manage.py reconcile``): a ping, then the pass;
- the runtime's own admin page, which checks its engine when opened (bounded in time);
- the monitor's follower of that engine, at each (re)connect of its event stream;
- a worker whose engine call failed and whose ping then found the engine silent;
- anything else that learns an engine's health (``runtime_health_record``).

Recording an engine unreachable also marks the instances there with the reason ("engine
unreachable since ...", ``containers.execution.engine_loss``): they keep their state.

Fields: ``health`` (``unknown`` until first checked, then ``reachable`` or
``unreachable``), ``health_checked_at`` (the last check), ``health_since`` (when the
current health began: it changes only when ``health`` does), ``last_seen_at`` (the last
time the engine answered) and ``last_error`` (why the last check failed; cleared when
the engine answers).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Now

from containers.engines.calls import ENGINE_CALL_SECONDS, engine_ping
from containers.execution.engine_loss import runtime_creates_wake, runtime_instances_mark_away
from containers.models import Runtime, RuntimeEvent
from containers.queues import Queue
from containers.runtime_history import runtime_event_record
from containers.runtime_stats import runtime_stats_check
from outbox.services import outbox_release_deferred
from webhooks.kinds import EventKind
from webhooks.services import webhook_event_emit

log = logging.getLogger(__name__)
Health = Runtime.Health


def _health_changed(*, runtime_id: int, was: str, now: str, error: str, actor: str) -> None:
    """The engine became unreachable, or reachable again: its history entry and its
    webhook (``engine.unreachable`` / ``engine.reachable``), both in the caller's
    transaction, from this one place."""
    reachable = now == Health.REACHABLE
    runtime = Runtime.objects.only("name").filter(pk=runtime_id).first()
    message = "the engine answers again" if reachable else (error or "the engine did not answer")
    runtime_event_record(
        runtime=runtime or Runtime(pk=runtime_id, name=""),
        kind=RuntimeEvent.Kind.REACHABLE if reachable else RuntimeEvent.Kind.UNREACHABLE,
        actor=actor,
        message=message,
        from_status=was,
        to_status=now,
    )
    webhook_event_emit(
        kind=EventKind.ENGINE_REACHABLE if reachable else EventKind.ENGINE_UNREACHABLE,
        owner_id=None,
        data={"runtime": runtime_id, "health": now, "error": "" if reachable else error},
    )


def runtime_health_record(
    *,
    runtime_id: int,
    reachable: bool,
    error: str = "",
    node_name: str = "",
    actor: str = "",
    unless_seen_since: tuple[datetime | None] | None = None,
) -> None:
    """Store one check's result on the runtime row: one UPDATE when the health is
    unchanged (two or three when it changed), no read.

    Idempotent for a repeated result: ``health_since`` keeps its value while the
    health stays the same. ``node_name`` fills the row's node name only if it is empty.
    An unreachable result also gives the instances there the reason
    (``runtime_instances_mark_away``: they keep their state; the reconciler clears it
    once it has settled them from what the engine holds); a change from unreachable to
    reachable makes the requests deferred meanwhile due at once. A change to
    ``unreachable``, and back from it to ``reachable``, writes the runtime's history entry
    (``RuntimeEvent``, with ``actor``: who checked, and the error as its reason) and sends
    the ``engine.unreachable`` / ``engine.reachable`` webhook, both in the same
    transaction as the change (``_health_changed``). Best outside a
    transaction (the marking skips instance rows that others hold); times are the
    database's clock.

    ``unless_seen_since=(last_seen_at,)``, for a failed call: the row's ``last_seen_at``
    read before the call began (``None`` inside: never seen). If the engine has answered
    another check since (the heartbeat found it back while this call still waited on a
    connection of the cut), the failure is older news and nothing is recorded.
    """
    health = Health.REACHABLE if reachable else Health.UNREACHABLE
    fields = {
        "health": Value(health),
        "health_checked_at": Now(),
        "health_since": Case(
            When(health=health, health_since__isnull=False, then=F("health_since")),
            default=Now(),
        ),
    }
    if reachable:
        fields.update(last_seen_at=Now(), last_error=Value(""))
        if node_name:
            fields["node_name"] = Case(
                When(node_name="", then=Value(node_name)), default=F("node_name")
            )
    else:
        fields["last_error"] = Value((error or "the engine did not answer")[:2000])
    row = Runtime.objects.filter(pk=runtime_id)
    if unless_seen_since is not None and not reachable:
        (seen,) = unless_seen_since
        row = row.exclude(Q(last_seen_at__gt=seen) if seen else Q(last_seen_at__isnull=False))
    with transaction.atomic():
        # One UPDATE per health the row may have had, each naming it in its WHERE; the
        # common case (no change) is the first. Of two checks at once, only the first
        # finds it changed (the second waits on the row lock, then finds the old health
        # gone and only refreshes the times), so each change is recorded and sent once.
        was = ""
        for old in (health, *(other for other in Health if other != health)):
            if row.filter(health=old).update(**fields):
                was = old
                break
        else:  # changed by another check meanwhile, gone, or seen since: times only
            if not row.update(**fields):
                log.info("runtime %s: a failed call older than its last answer", runtime_id)
                return
        changed = bool(was) and was != health
        came_back = changed and was == Health.UNREACHABLE
        if came_back or (changed and not reachable):
            _health_changed(runtime_id=runtime_id, was=was, now=health, error=error, actor=actor)
    if changed and reachable and not came_back:  # creates waiting for an engine look again
        outbox_release_deferred(queue=Queue.CREATE)
    if changed:
        log.log(
            logging.INFO if reachable else logging.WARNING,
            "runtime %s: engine %s%s",
            runtime_id,
            health,
            f" ({error})" if error else "",
        )
    if not reachable:
        runtime_instances_mark_away(runtime_id=runtime_id)
        if changed:  # creates that never reached it go elsewhere now, not after a backoff
            runtime_creates_wake(runtime_id=runtime_id)
    elif came_back:
        # Requests deferred while it was away (``handlers.begin._engine_away``) go now, not at
        # the end of their wait.
        for queue in Queue:
            outbox_release_deferred(queue=queue)


def runtime_rows_health_record(
    *, runtime: Runtime, reachable: bool, error: str = "", actor: str = ""
) -> None:
    """``runtime_health_record`` on every enabled row of ``runtime``'s daemon (rows sharing
    a driver and address share one engine, one stream and one ping)."""
    rows = Runtime.objects.filter(enabled=True, driver=runtime.driver, base_url=runtime.base_url)
    for runtime_id in rows.values_list("pk", flat=True):
        runtime_health_record(runtime_id=runtime_id, reachable=reachable, error=error, actor=actor)


def runtime_health_check(
    *, runtime: Runtime, seconds: float = ENGINE_CALL_SECONDS, actor: str = ""
) -> bool:
    """Ping the runtime's engine now (at most ``seconds``), record and return the result;
    an engine that answers is also asked whether it gives CPU figures
    (``runtime_stats_check``: Kubernetes only, at most ``seconds`` more).

    Must not run inside a transaction that other work waits on (it waits on the engine).
    """
    reachable, problem = engine_ping(runtime=runtime, seconds=seconds)
    runtime_health_record(runtime_id=runtime.pk, reachable=reachable, error=problem, actor=actor)
    if reachable:  # and whether it gives CPU figures, where that is the engine's own
        runtime_stats_check(runtime_id=runtime.pk, seconds=seconds)
    return reachable
