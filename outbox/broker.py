"""gobrave's django-q2 broker on PostgreSQL: the claim is the hand-off, NOTIFY wakes the pusher.

Configured as ``Q_CLUSTER["broker_class"]`` when the app's database is PostgreSQL and
``queue.broker`` is ``orm`` (the default); on SQLite django-q2's own ORM broker runs.
What it guarantees:

1. **The hand-off commits with the claim, because it is the claim.** The dispatcher's
   claim marks rows ``processing`` under a fresh token and, in the same transaction,
   NOTIFYs ``HANDOFF_CHANNEL`` with the queue's name (``handoff()``). No copy of the row
   is inserted, locked or deleted: a claim that rolls back hands nothing off.
2. **A pusher wakes on NOTIFY, not on a poll, and claims for its own queue.**
   ``dequeue()`` (run by each cluster's pusher) claims its queue's due rows with
   ``relay.claim()`` (the same claim, limits and lease as the dispatcher's), then reads
   the claimed rows of its queue whose handler has not begun (``started_at IS NULL``)
   under a live lease, and returns each as the django-q2 task
   ``outbox.tasks.execute(id, token)``, once per claim: it remembers the claims it pushed
   while they stay unstarted. With nothing new it blocks on its LISTEN connection (the
   relay's channel and the hand-off channel), at most ``WAIT`` seconds (the safety net),
   so a commit reaches a worker without a dispatcher in between. The dispatcher then
   only polls (``poll_interval``): it claims what no pusher took, e.g. while a cluster
   is down. The LISTEN connection is the broker's own (autocommit), never Django's.
   Each read also renews the pusher's liveness mark (``outbox.liveness``).
3. **One execution per claim still rests on ``relay.begin()``.** Several clusters of one
   queue may each push the same claim; the compare-and-set on ``started_at`` lets one run
   it and turns the others into ``duplicate`` at no cost to the row.
4. **A killed cluster loses nothing it had not begun.** Its pushed-but-unstarted claims
   are still ``processing`` with ``started_at`` unset and a live lease: the next pusher of
   that queue (a restarted cluster, or another one) pushes them at once. A handler killed
   mid-run is the relay's business: its lease runs out and the dispatcher reclaims it.
5. **Other tasks** (``async_task`` of any function to these clusters) go through
   django-q2's ``OrmQ`` table in the caller's transaction, with a NOTIFY, and are taken
   with ``DELETE ... FOR UPDATE SKIP LOCKED`` (at most once: a cluster killed with such a
   task in memory loses it). ``acknowledge()`` has nothing left to delete.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import time
import uuid

import psycopg
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone
from django_q.brokers import Broker
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from core import counters, prepared
from outbox import conf, forking, listen, liveness, relay
from outbox.models import OutboxEvent

log = logging.getLogger(__name__)

HANDOFF_CHANNEL = "gobrave_outbox_handoff"
# Connections inherited across fork: kept, never closed or collected in the child (that
# would end the parent's session on the shared socket).
_inherited: list[psycopg.Connection] = []
WAIT = 1.0  # seconds a pusher blocks on LISTEN before it re-reads anyway
# How often a pusher gives its Django connection back (to the pool, or closed when it is
# old or unusable: ``close_old_connections``); not per read, where taking it back again
# cost more than the claim's own statements. A failed read drops it at once.
CONNECTION_CHECK_EVERY = 1.0
TASK = "outbox.tasks.execute"

# One statement, in the claim's transaction: the unstarted claims of a queue, and up to
# ``bulk`` other tasks of it taken out of django-q2's table (``claim_token`` NULL marks
# those).
_READ = f"""
WITH taken AS (
    DELETE FROM {OrmQ._meta.db_table} WHERE id IN (
        SELECT id FROM {OrmQ._meta.db_table} WHERE key = %(queue)s AND lock <= now()
        ORDER BY id LIMIT %(bulk)s FOR UPDATE SKIP LOCKED)
    RETURNING id, payload
)
SELECT id, claim_token::text, fairness_key FROM {OutboxEvent._meta.db_table}
WHERE queue = %(queue)s AND status = 'processing' AND started_at IS NULL
  AND lease_expires_at > now()
UNION ALL
SELECT id, NULL, payload FROM taken
"""


def handoff(queue: str, event_id: int, token: str) -> None:
    """The dispatcher's sender: wake ``queue``'s pushers when the claim commits.

    Runs in the claim's transaction on Django's connection; PostgreSQL folds identical
    notifications of one transaction into one.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [HANDOFF_CHANNEL, queue])


def _fair_order(
    keys: dict[tuple[int, str], str], pushed: set[tuple[int, str]], claimed: list[int]
) -> list[tuple[int, str]]:
    """The claims of ``keys`` (``{(id, token): fairness key}``) not ``pushed`` yet, in the
    order workers should start them: this read's own claim (``claimed``) as the claim
    ordered it (round-robin by key), then claims made elsewhere (another dispatcher,
    another cluster) interleaved by key too (every key's oldest, then every key's next...),
    so that fair share survives a claim this pusher did not make."""
    turn = {row_id: index for index, row_id in enumerate(claimed)}
    new = sorted(set(keys) - pushed)
    own = sorted((c for c in new if c[0] in turn), key=lambda c: turn[c[0]])
    by_key: dict[str, list[tuple[int, str]]] = {}
    for c in new:
        if c[0] not in turn:
            by_key.setdefault(keys[c], []).append(c)
    rounds = itertools.zip_longest(*by_key.values())
    return own + [c for layer in rounds for c in layer if c is not None]


class OutboxBroker(Broker):
    """django-q2 broker for one cluster (``list_key`` = the outbox queue's name)."""

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key)
        self._reset()

    def __setstate__(self, state) -> None:
        super().__setstate__(state)
        self._reset()

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._pid: int | None = None
        self._beat: tuple[str, float] | None = None  # (mark name, last beat) in this pid
        self._pushed: set[tuple[int, str]] = set()
        self._read_now = True  # read before the first wait
        self._fresh_until = 0.0  # monotonic time of the next ``close_old_connections``

    @staticmethod
    def get_connection(list_key: str | None = None):
        return None  # connected lazily, in the process that reads (see _connection)

    def _connection(self) -> psycopg.Connection:
        """This process's LISTEN connection; made on first use and after a fork."""
        if self._conn is not None and self._pid != os.getpid():
            _inherited.append(self._conn)
            self._conn = None
        if self._conn is None or self._conn.closed:
            self._conn = listen.connect(f"gobrave-broker-{self.list_key}")
            self._conn.execute(f"LISTEN {HANDOFF_CHANNEL}")
            self._conn.execute(f"LISTEN {conf.NOTIFY_CHANNEL}")
            self._pid = os.getpid()
            self._read_now = True  # anything committed before the LISTEN had no wake-up
            if multiprocessing.parent_process() is not None:  # a cluster's pusher
                counters.counters_buffer_start()  # its claims count once a second
                forking.health_checks_off()  # a failed claim reconnects below
        return self._conn

    def _close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None

    # -- django-q2's broker interface ---------------------------------------------------

    def enqueue(self, task: str) -> int:
        """Queue any django-q2 task in the caller's transaction and wake the pushers."""
        row = OrmQ.objects.using(Conf.ORM or "default").create(
            key=self.list_key, payload=task, lock=timezone.now()
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [HANDOFF_CHANNEL, self.list_key])
        return row.pk

    def dequeue(self) -> list[tuple[str, str]] | None:
        """Tasks to run now: this queue's due rows (claimed here), its other unstarted
        claims, then other queued tasks.

        0. Renew the pusher's liveness mark when it is due (``_liveness_beat``), so that
           no claim's hand-off waits for it.
        1. Unless something woke us since the last read, block on LISTEN (rows committed
           or slots freed: ``gobrave_outbox``; claims made elsewhere:
           ``HANDOFF_CHANNEL``) up to ``WAIT``; notifications naming another queue do
           not end the wait (``_wait``).
        2. Drain the wake-ups (any commit after this point sends a fresh one).
        3. Claim this queue's due rows within its in-flight limit (``relay.claim``, as a
           dispatcher does: the pusher is the dispatcher of its own queue, one process
           hop less between a commit and a worker).
        4. Read the unstarted claims; return those not pushed yet in fair-share order
           (``_fair_order``); forget the rest.
        5. Take up to ``bulk`` other tasks (deleted as they are taken).
        Steps 3 to 5 are one transaction (one commit per read); the LISTEN connection only
        waits.
        """
        try:
            conn = self._connection()
            if time.monotonic() >= self._fresh_until:
                close_old_connections()
                self._fresh_until = time.monotonic() + CONNECTION_CHECK_EVERY
            # Before the wait, not after the claim: the tasks of the last read are with
            # django-q2's workers already, and those of this one wait for no beat.
            self._liveness_beat()
            if not self._read_now:
                self._wait(conn)
            for _ in conn.notifies(timeout=0):
                pass
            self._read_now = False
            batch = conf.value("batch_size")
            with transaction.atomic():  # one commit: the claim, then the read
                claimed = relay.claim(self.list_key, batch)
                if len(claimed) >= batch:
                    self._read_now = True  # more may be due
                read = prepared.execute(_READ, {"queue": self.list_key, "bulk": Conf.BULK})
                found = read.fetchall()
                if any(token is None for _, token, _ in found):
                    # Tasks taken out of OrmQ: their deletion must be durable before a
                    # worker runs them (the claim alone may commit asynchronously).
                    prepared.execute("SET LOCAL synchronous_commit = on")
        except (psycopg.Error, DatabaseError) as exc:
            log.warning("broker %s: %s; reconnecting", self.list_key, exc)
            self._close()
            close_old_connections()
            time.sleep(WAIT)
            return None
        keys = {(row_id, token): key for row_id, token, key in found if token is not None}
        others = sorted((row_id, payload) for row_id, token, payload in found if token is None)
        new = _fair_order(keys, self._pushed, [row_id for row_id, _ in claimed])
        self._pushed = set(keys)
        if len(others) >= Conf.BULK:
            self._read_now = True  # more may be waiting
        tasks = [(f"outbox-{i}-{token}", self._package(i, token)) for i, token in new]
        tasks += [(str(task_id), payload) for task_id, payload in others]
        return tasks or None

    def _wait(self, conn: psycopg.Connection) -> None:
        """Block until a notification for this queue (its name, or none: a slot freed,
        a row of any queue may be due), or ``WAIT`` seconds in all. Notifications that
        name another queue are let pass: its own pushers claim it, and a read here would
        only take the claimers' lock from them."""
        deadline, woke = time.monotonic() + WAIT, False
        while not woke and (left := deadline - time.monotonic()) > 0:
            # Each generator runs to its end (``stop_after``), never left half-run: psycopg
            # gives the connection back when it closes.
            for note in conn.notifies(timeout=left, stop_after=1):
                woke = woke or note.payload in ("", self.list_key)

    def _liveness_beat(self) -> None:
        """Renew this pusher's liveness mark every ``poll_interval`` (``outbox.liveness``:
        a cluster that runs counts as a live process at a dispatcher's start)."""
        now = time.monotonic()
        if self._beat is None:
            self._beat = (liveness.beat_name(liveness.cluster_kind(self.list_key)), 0.0)
        name, last = self._beat
        if now - last >= conf.value("poll_interval"):
            liveness.process_beat(name=name, kind=liveness.PUSHER)
            self._beat = (name, now)

    def _package(self, event_id: int, token: str) -> str:
        """The task ``async_task(TASK, event_id, token, save=False)`` would have queued."""
        return SignedPackage.dumps(
            {
                "id": uuid.uuid4().hex,
                "name": f"outbox-{event_id}-{token[:8]}",
                "func": TASK,
                "args": (event_id, token),
                "kwargs": {},
                "save": False,
                "ack_failure": True,
                "started": timezone.now(),
            }
        )

    def acknowledge(self, task_id) -> None:
        """Nothing to do: a claim is finished by its outcome, other tasks left at dequeue."""

    def fail(self, task_id) -> None:
        """Nothing to do (see ``acknowledge``)."""

    def delete(self, task_id) -> None:
        if not str(task_id).startswith("outbox-"):
            OrmQ.objects.using(Conf.ORM or "default").filter(pk=task_id).delete()

    def queue_size(self) -> int:
        claims = OutboxEvent.objects.filter(
            queue=self.list_key, status="processing", started_at__isnull=True
        ).count()
        return claims + OrmQ.objects.filter(key=self.list_key).count()

    def lock_size(self) -> int:
        return 0

    def purge_queue(self):
        return OrmQ.objects.filter(key=self.list_key).delete()

    def delete_queue(self):
        return self.purge_queue()

    def ping(self) -> bool:
        """A short connection of its own (the sentinel forks after it: nothing kept)."""
        try:
            with listen.connect(f"gobrave-broker-{self.list_key}-ping") as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def info(self) -> str:
        if not self._info:
            self._info = f"gobrave outbox broker (PostgreSQL, LISTEN {HANDOFF_CHANNEL})"
        return self._info
