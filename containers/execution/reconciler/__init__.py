"""The reconciler: compare every instance with its engine and repair what was missed.

contract §5 (and the start_timeout rule of section 4). Events are not lossless (the
engine keeps only its last few hundred, and nothing is heard while the monitor is down),
so ``reconcile()`` runs every ``reconcile_interval``, after every (re)connect of the
monitor's event stream, and on demand (``manage.py reconcile --once``).

Which instances are compared, and how one is compared: ``containers.execution.sync``.

Every transition goes through ``lifecycle.move`` (via ``observe.apply_observation``) on a
row held with ``select_for_update()`` inside ``transaction.atomic()``; engine calls are
made with no transaction open.

Where what lives (the steps are ``reconcile``'s):
- ``passes``: ``reconcile`` (one pass) and ``runtime_pass`` (step 1 for one runtime).
- ``rows``: which instances a pass compares (the active ones; the stopped ones a batch at
  a time, in turn: ``STOPPED_BATCH``, ``_stopped_after``).
- ``timeouts``: ``instance_fail_stuck`` (step 2: ``start_timeout``,
  ``unschedulable_timeout``).
- ``orphans``: ``orphans_scan`` (step 4).
- ``engines``: which daemon a row points at (``engine_key``, ``distinct_engines``) and an
  engine's bounded share of a pass (``engine_share``).
- ``report``: ``ReconcileReport``; ``config``: the settings it reads.
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up (``_stopped_rows`` finds
``_stopped_after`` in ``rows``).
"""

from containers.execution.reconciler.engines import (
    EngineKey,
    distinct_engines,
    engine_key,
    engine_share,
)
from containers.execution.reconciler.orphans import NIL_UUID, orphans_scan
from containers.execution.reconciler.passes import reconcile, runtime_pass
from containers.execution.reconciler.report import ReconcileReport
from containers.execution.reconciler.rows import STOPPED_BATCH, _active_rows, _stopped_rows
from containers.execution.reconciler.timeouts import instance_fail_stuck

__all__ = [
    "NIL_UUID",
    "STOPPED_BATCH",
    "EngineKey",
    "ReconcileReport",
    "_active_rows",
    "_stopped_rows",
    "distinct_engines",
    "engine_key",
    "engine_share",
    "instance_fail_stuck",
    "orphans_scan",
    "reconcile",
    "runtime_pass",
]
