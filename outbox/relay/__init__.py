"""The relay's state machine for one outbox row: claim, start, outcome (contract §3).

Every time a lease or a due time is set or compared, it is the database's clock
(``Now()``), never a host's: a dispatcher and a worker on hosts whose clocks disagree
still agree on when a lease runs out.

Every write here is a compare-and-set on the row's claim token, so a worker whose claim
expired (and was handed to someone else) changes nothing. Every status write is
``OutboxQuerySet.move_to``: one UPDATE whose WHERE also requires a status from which the
state machine (``outbox.models.TRANSITIONS``) allows the move. Nothing here holds a
transaction open across a handler.

Where what lives:
- ``picks``: what a claim picks (``_pick``: expired leases first, then due pending rows
  round-robin by fairness key, ``_fair_pending``) and the turns of the keys served
  (``_mark_served``).
- ``claims``: ``claim`` (with the claim guard, ``_guarded``, and the reclaims counted and
  logged), ``claims_release_unstarted``, ``begin`` and ``begin_delivered``.
- ``writes``: an outcome write (``_outcome_write``, retried up to ``WRITE_TRIES``) and the
  compare-and-set it makes (``_finish``; on PostgreSQL one round trip, ``_finish_sql``).
- ``running``: ``execute`` and ``run`` (a begun claim's handler and its outcome recorded:
  sent or superseded, deferred, retried after ``backoff``, dead).
- ``purges``: ``purge_sent`` and ``purge_resolved_dead``.
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up (``_outcome_write`` finds
``_write_pause`` in ``writes``).
"""

from outbox.relay.claims import (
    _count_crashes,
    _count_unstarted,
    _guarded,
    begin,
    begin_delivered,
    claim,
    claims_release_unstarted,
    log_reclaims,
)
from outbox.relay.picks import ROW_FIELDS, _mark_served, _pending_due, _pick, _unblocked
from outbox.relay.purges import purge_resolved_dead, purge_sent
from outbox.relay.running import Finish, backoff, execute, run
from outbox.relay.writes import WRITE_TRIES, _finish

__all__ = [
    "Finish",
    "ROW_FIELDS",
    "WRITE_TRIES",
    "_count_crashes",
    "_count_unstarted",
    "_finish",
    "_guarded",
    "_mark_served",
    "_pending_due",
    "_pick",
    "_unblocked",
    "backoff",
    "begin",
    "begin_delivered",
    "claim",
    "claims_release_unstarted",
    "execute",
    "log_reclaims",
    "purge_resolved_dead",
    "purge_sent",
    "run",
]
