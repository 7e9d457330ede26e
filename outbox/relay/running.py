"""A begun claim's handler run (``execute``, ``run``) and its outcome recorded: sent or
superseded, deferred, retried after ``backoff``, or dead."""

from __future__ import annotations

import datetime as dt
import logging
import random
import traceback
import uuid
from collections.abc import Callable

from django.db.models.functions import Now

from core.counters import counter_add
from outbox import conf, hooks, registry, stopping
from outbox.counters import RelayStat
from outbox.heartbeat import Heartbeat
from outbox.models import OutboxEvent, OutboxStatus
from outbox.outcomes import HANDLER_OUTCOMES, Outcome
from outbox.registry import Defer, PermanentFailure, Retry, RetryLater
from outbox.relay.claims import begin_delivered
from outbox.relay.writes import _finish, _finish_in_txn, _outcome_write
from outbox.services import outbox_release_deferred

log = logging.getLogger(__name__)


def backoff(attempts: int) -> float:
    """Seconds before retry number ``attempts``: exponential, capped, spread by up to +50%."""
    base = min(conf.value("backoff_cap"), conf.value("backoff_base") * 2 ** max(0, attempts - 1))
    return base * (1 + random.uniform(0, 0.5))


def execute(event_id: int, token: uuid.UUID | str) -> Outcome:
    """Run the handler for one claimed row and record its outcome. Never raises.

    While the handler runs and its outcome is written, a heartbeat keeps the claim
    alive (``outbox.heartbeat``); if this process dies, the row is due again within
    ``liveness_timeout``. Returns what happened: ``duplicate``, ``sent``, ``superseded``,
    ``deferred``, ``retried``, ``dead`` or ``stale`` (the claim was lost before the outcome).
    A django-q2 worker runs ``outbox.chain.execute`` instead, which goes on with the
    rows it claims in the outcome's transaction.
    """
    token = uuid.UUID(str(token))
    event = begin_delivered(event_id, token)
    if event is None:
        return Outcome.DUPLICATE
    with stopping.handling(), Heartbeat(event_id, token):
        return run(event, token)


# How a success is recorded: ``_finish``'s signature. ``outbox.chain`` passes its own,
# which also claims the worker's next row in the same transaction.
Finish = Callable[..., bool]


def run(event: OutboxEvent, token: uuid.UUID, *, finish: Finish | None = None) -> Outcome:
    """Run the handler of a begun claim and record its outcome (``finish`` records a
    success, ``sent`` or ``superseded``; default ``_finish``). Never raises."""
    route = registry.route(event.kind)
    try:
        if route is None:
            raise PermanentFailure(f"no handler registered for {event.kind}")
        if event.attempts >= conf.value("max_attempts"):
            # The whole story stays the row's last error; the hook gets the last line.
            raise PermanentFailure(
                f"{event.last_error}\ngave up after {event.attempts} attempts:"
                f" {_last_line(event.last_error)}"
            )
        outcome = route.handler(event)
    except Defer as exc:
        log.debug("outbox #%s deferred: %s", event.id, exc)
        return _record(event, token, Outcome.DEFERRED, delay=exc.delay)
    except PermanentFailure as exc:
        return _dead(event, token, route, str(exc))
    except Exception as exc:  # noqa: BLE001 - any handler error is a retriable failure
        detail = "".join(traceback.format_exception(exc))
        hooks.emit("error", event=event, error=detail)
        if isinstance(exc, RetryLater):  # a reason in a person's words (outbox.registry)
            return _retry(event, token, route, detail, exc.retry_after, _last_line(str(exc)))
        return _retry(event, token, route, detail, 0.0, _last_line(detail))
    if outcome not in HANDLER_OUTCOMES:
        return _dead(event, token, route, f"handler returned {outcome!r}, not sent or superseded")
    return _record(event, token, Outcome(outcome), finish=finish or _finish)


def _record(
    event: OutboxEvent,
    token: uuid.UUID,
    outcome: Outcome,
    *,
    delay: float = 0,
    finish: Finish = _finish,
) -> Outcome:
    if outcome == Outcome.DEFERRED:
        target = OutboxStatus.PENDING
        wait = max(float(conf.value("poll_interval")), delay)
        fields = dict(
            available_at=Now() + dt.timedelta(seconds=wait),
            claim_token=None,
            lease_expires_at=None,
            started_at=None,
            outcome=Outcome.DEFERRED,
        )
    else:
        target = OutboxStatus.SENT
        fields = dict(sent_at=Now(), outcome=outcome, lease_expires_at=None)
    if not finish(event.id, token, target, **fields):
        return Outcome.STALE
    counter_add(RelayStat(outcome))
    if outcome == Outcome.SUPERSEDED:
        log.info("outbox #%s %s for %s superseded", event.id, event.kind, event.aggregate_id)
    return outcome


def _retry(event, token, route, detail: str, retry_after: float, reason: str) -> Outcome:
    """Record a retriable failure: ``pending`` again after the backoff (``retry_after`` its
    floor), ``attempts + 1``, the traceback kept (``detail``); dead instead when that makes
    ``max_attempts``. The kind's ``on_retry`` hook, if any, is told the schedule and the
    ``reason`` in the same transaction (on PostgreSQL without a hook: one round trip)."""
    attempts = event.attempts + 1
    max_attempts = conf.value("max_attempts")
    if attempts >= max_attempts:
        gave_up = f"gave up after {attempts} attempt{'s' if attempts > 1 else ''}: {reason}"
        return _dead(event, token, route, detail, attempts=attempts, reason=gave_up)
    delay = max(backoff(attempts), retry_after)
    fields = dict(
        attempts=attempts,
        available_at=Now() + dt.timedelta(seconds=delay),
        last_error=detail[-8000:],
        claim_token=None,
        lease_expires_at=None,
        started_at=None,
        outcome=Outcome.RETRIED,
    )
    hook = route.on_retry if route is not None else None
    if hook is None:
        finished = _finish(event.id, token, OutboxStatus.PENDING, **fields)
    else:
        retry = Retry(attempts=attempts, max_attempts=max_attempts, delay=delay, reason=reason)

        def write() -> bool:
            if not _finish_in_txn(event.id, token, OutboxStatus.PENDING, **fields):
                return False
            hook(event, retry)
            return True

        finished = bool(_outcome_write(write, event_id=event.id))
    if not finished:
        return Outcome.STALE
    # Waiting for its retry, the row holds no capacity (contract §4): what was deferred on
    # its queue may go now.
    outbox_release_deferred(queue=event.queue)
    counter_add(RelayStat.RETRIED)
    hooks.emit("retry", event=event, attempts=attempts, delay=delay, error=detail)
    return Outcome.RETRIED


def _dead(
    event, token, route, detail: str, attempts: int | None = None, reason: str | None = None
) -> Outcome:
    """Record the row ``dead`` with ``detail`` (kept whole as its last error) and run the
    kind's ``on_dead`` hook in the same transaction with ``reason`` (default: the last
    line of ``detail``)."""

    def write() -> bool:
        if not _finish_in_txn(
            event.id,
            token,
            OutboxStatus.DEAD,
            attempts=attempts if attempts is not None else event.attempts + 1,
            last_error=detail[-8000:],
            lease_expires_at=None,
            outcome=Outcome.DEAD,
        ):
            return False
        if route is not None and route.on_dead is not None:
            route.on_dead(event, reason if reason is not None else _last_line(detail))
        return True

    if not _outcome_write(write, event_id=event.id):
        return Outcome.STALE
    counter_add(RelayStat.DEAD)
    hooks.emit("dead", event=event, error=detail)
    return Outcome.DEAD


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text
