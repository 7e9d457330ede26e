"""The runner: advance a DAG run from its stored state (contract §7).

``dag_run_advance`` is the handler of the ``DagRunAdvance`` outbox kind (control queue,
aggregate = the run). It is idempotent and derives everything from what is stored: the
run, its nodes, and their instances as the containers app keeps them. Whatever settles
or removes a node's instance asks for an advance (``dags.receivers``). Steps:

1. **Settle** (one short transaction, the run's row locked): start a pending run (pick
   its one engine); settle every running node from its instance (exit 0 → succeeded;
   non-zero exit, instance failed, vanished, or stopped/deleted by anyone but the runner
   → failed with the reason; while cancelling → cancelled); give a failed node with a
   retry left a new attempt (``ready``); skip what lies below a node that failed for
   good; make ready the nodes whose dependencies all succeeded; end the run when no
   node can move.
2. **Create** ready nodes, one node per short transaction (run locked, then the normal
   create service, which takes the admission gate last; the first ready node's in step
   1's own transaction, unless leftovers must be removed first): the instance id is derived
   from (run, node, attempt). ``queue_full`` (or a quota refusal, ``owner_quota`` or
   ``quota_exceeded``, while the owner has something in flight that may free room)
   leaves the node ready and defers the advance; a refusal that waiting cannot cure
   fails the node, and step 1 runs again.
3. **Clean up** (no run lock; each request its own transaction through the container
   services): the stop or delete requests that the config and the node states call for
   (cancel, ``delete_container_on_node_success``, ``dag_node_cleanup_on_failed``,
   ``dag_node_cleanup_on_dag_finished``), each failed attempt's output first kept on its
   node (its last 64 KiB, one bounded engine call, or a note why not) before the delete
   of its container is asked for, and the run's workspace once a finished run's
   instances are all gone under ``delete``. After the creates, so the next node waits
   on nothing else; a crash between them only delays the cleanup to the next advance.
Container code never locks a run; the runner locks a run, then (in the create) the
admission gate, never the reverse.

Where what lives:
- ``passes``: ``Pass`` (what step 1 decided for steps 2 and 3), the runner's constants
  and its config.
- ``settle``: step 1 (``_step_settle``).
- ``create``: step 2 (``_step_create``, ``_create_one``, ``_create_locked``).
- ``cleanup``: step 3 (``_step_cleanup``) and the requests and kept outputs step 1
  decides for it.
- ``advance``: ``dag_run_advance`` (the steps, in rounds) and ``dag_runs_at_cold_start``.
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up.
"""

from dags.runner.advance import dag_run_advance, dag_runs_at_cold_start
from dags.runner.passes import (
    DELETABLE,
    MAX_ROUNDS,
    NOT_RECOVERED,
    POLICY_RANK,
    RECOVERED_AT_START,
    SETTLED_WELL,
    STOPPABLE,
    Pass,
)

__all__ = [
    "DELETABLE",
    "MAX_ROUNDS",
    "NOT_RECOVERED",
    "POLICY_RANK",
    "Pass",
    "RECOVERED_AT_START",
    "SETTLED_WELL",
    "STOPPABLE",
    "dag_run_advance",
    "dag_runs_at_cold_start",
]
