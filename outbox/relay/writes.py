"""An outcome write: a compare-and-set on the claim token, a transaction of its own with
``statement_timeout`` set for itself, retried (``_outcome_write``); on PostgreSQL one round
trip (``_finish_sql``)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connection, transaction

from outbox import conf
from outbox.models import OutboxEvent
from outbox.services import ANY_DUE, outbox_notify_if_due

log = logging.getLogger(__name__)


T = TypeVar("T")


WRITE_TRIES = 3


def _write_pause(attempt: int) -> None:
    """Between two tries of an outcome write (a seam for tests)."""
    time.sleep(min(2.0, 0.25 * 2**attempt))


def _outcome_write(write: Callable[[], T], *, event_id: int, limited: bool = False) -> T | None:
    """Run one outcome write, a transaction of its own, so that it finishes.

    1. Each try is one transaction that first sets PostgreSQL's ``statement_timeout`` to
       ``outbox.write_timeout`` for itself only (``SET LOCAL``): a write stuck on a lock
       or a stalled server is cancelled, never left hanging. The claim's advisory lock
       and the admission gate run in other transactions and keep waiting as they must.
       (``limited``: ``write`` is one statement that sets it itself, ``_finish_sql``.)
    2. A try that is cancelled or loses its connection is retried after a pause, up to
       ``WRITE_TRIES`` times. If none lands, None: the outcome is left to the lease (the
       row is due again when it runs out, and the handler is idempotent).
    """
    for attempt in range(1, WRITE_TRIES + 1):
        try:
            if limited:
                return write()
            with transaction.atomic():
                conf.limit_statements(connection)
                return write()
        except DatabaseError as exc:
            log.warning(
                "outbox #%s: outcome write %s/%s failed: %s", event_id, attempt, WRITE_TRIES, exc
            )
            if not connection.in_atomic_block and not connection.is_usable():
                connection.close()
            if attempt < WRITE_TRIES:
                _write_pause(attempt)
    log.error("outbox #%s: outcome not recorded; the row is left to its lease", event_id)
    return None


def _finish_in_txn(event_id: int, token: uuid.UUID, target: str, **fields) -> bool:
    """Move the row to ``target`` with ``fields``, only while the claim is still ours (a
    compare-and-set on the token and on the sources the state machine allows), and wake
    the dispatchers if a row waits for the slot this frees. Runs inside the caller's
    transaction.

    Without the wake-up a backlog would move one batch per ``poll_interval``.
    """
    finished = (
        OutboxEvent.objects.filter(id=event_id, claim_token=token).move_to(target, **fields) == 1
    )
    if finished:
        outbox_notify_if_due()
    return finished


def _one_trip(connection) -> bool:
    """Whether ``_finish_sql`` can run here: PostgreSQL with client-side binding (Django's
    default: several statements in one query), and no transaction of the caller's."""
    return (
        conf.is_postgres(connection)
        and not connection.in_atomic_block
        and not connection.settings_dict["OPTIONS"].get("server_side_binding")
    )


def _finish_sql(event_id: int, token: uuid.UUID, target: str, **fields) -> bool:
    """``_finish_in_txn`` and its ``statement_timeout`` in one round trip, one commit.

    One query of two statements, which PostgreSQL runs as one implicit transaction:
    ``SET LOCAL statement_timeout`` (ends with it), then the compare-and-set (``move_to``'s
    own UPDATE) in a CTE whose result decides the NOTIFY (``ANY_DUE``, as
    ``outbox_notify_if_due``). A cancelled or failed statement rolls it all back.
    """
    update, params = OutboxEvent.objects.filter(id=event_id, claim_token=token).move_to_sql(
        target, connection, **fields
    )
    timeout = int(conf.value("write_timeout") * 1000)
    sql = (
        f"SET LOCAL statement_timeout = {timeout}; "
        f"WITH moved AS ({update} RETURNING 1), "
        f"woke AS (SELECT pg_notify(%s, '') WHERE EXISTS (SELECT 1 FROM moved) AND {ANY_DUE}) "
        "SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM woke)"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, (*params, conf.NOTIFY_CHANNEL))
        cursor.nextset()  # past the SET
        moved, _woke = cursor.fetchone()
    return moved == 1


def _finish(event_id: int, token: uuid.UUID, target: str, **fields) -> bool:
    """``_finish_in_txn`` as an outcome write of its own (``_outcome_write``): on
    PostgreSQL one round trip (``_finish_sql``)."""
    if _one_trip(connection):
        write = lambda: _finish_sql(event_id, token, target, **fields)  # noqa: E731
        return bool(_outcome_write(write, event_id=event_id, limited=True))
    return bool(
        _outcome_write(lambda: _finish_in_txn(event_id, token, target, **fields), event_id=event_id)
    )
