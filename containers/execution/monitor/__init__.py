"""The monitor: follow each engine's event stream and apply it (contract §5).

``manage.py run_monitor`` runs one ``Monitor``:

1. At start, refresh the templates' image status (``refresh_image_status_on_start``).
2. One follower thread per engine (enabled runtimes; rows sharing a daemon share one)
   opens the engine's event stream for our installation label from its stored cursor,
   asks for a full reconcile (events alone are lossy), and files each event in its
   inbox (``containers.execution.inbox``: one shard per applier, by instance), which
   the appliers (``containers.execution.appliers``: ``monitor_appliers`` threads shared
   by every engine) apply in parallel across instances and in the stream's order for
   each instance, as ``event_apply`` does: map it to the instance (label
   ``io.gobrave.instance``), inspect the container and apply ``target_for`` of what the
   engine says now (more reliable than the event alone), except where the event
   carries the container's state of the instance's current run (a Kubernetes watch
   event carries the Pod: ``sync.event_state_current``) or is a clean exit of a
   container followed from its create (``StreamSeen``), which are applied from the
   event; then move the cursor to the inbox's watermark (the last event before which
   all are applied; stored at most once a second, ``CURSOR_STORE_EVERY``). A follower
   holds no database connection while it waits on its stream: it takes one
   (``Monitor.db``, ``FOLLOWER_DB_SLOTS`` at once) only for its own rows at each
   (re)connect. So N engines cost N follower threads and
   at most 2 + ``monitor_appliers`` + ``FOLLOWER_DB_SLOTS`` connections (one the
   heartbeat's), whatever N is (docs/architecture.md, "The monitor at fleet size"). A dropped stream
   (the SDK just ends the iterator) or an unreachable engine is logged and retried with
   a backoff capped at ``BACKOFF_CAP``; the monitor never exits on engine trouble.
3. A heartbeat thread (``containers.execution.heartbeat``) pings every engine every
   ``engine_ping_interval`` and records its health on its runtime rows; an engine that
   answers again after being recorded unreachable gets a reconcile at once, and its
   follower, if waiting to reconnect, is woken.
4. The main thread renews the monitor's liveness mark every ``poll_interval`` (a live
   process at a dispatcher's start, ``outbox.liveness``) and runs the reconcile: after
   every (re)connect and every ``reconcile_interval``, and looks for newly enabled
   runtimes. It also looks again at
   instances whose event found their worker busy (the worker may have inspected the
   engine just before the event): 50 ms later, then less and less often (at most a
   second apart), until the worker is done; and stores the cursor of a follower whose
   stream went quiet. Every ``container.policies.interval`` it runs the lifecycle
   policies' pass (``containers.execution.policies``).
5. SIGTERM sets a flag: the main thread finishes its step, waits until no follower is
   applying events (a follower blocked reading its stream holds nothing), and returns,
   so the process exits 0.
Each step calls ``close_old_connections()``; each thread closes its connections at exit.

Where what lives:
- ``cursors``: a stream's cursor (stored at most every ``CURSOR_STORE_EVERY``), replays
  told apart (``is_duplicate``), what one session saw (``StreamSeen``).
- ``events``: one event applied to its instance (``event_apply``, ``event_state_look``),
  a run of them in one transaction (``event_run_apply``), ``needs_recheck``.
- ``follower``: the ``Follower`` thread of one engine (step 2).
- ``loop``: the ``Monitor`` (steps 1, 4 and 5).
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up (``Follower`` finds
``event_state_look`` and ``event_run_apply`` in ``follower``; ``event_state_look`` finds
``instance_read`` in ``events``).
"""

from containers.execution.monitor.cursors import (
    CURSOR_STORE_EVERY,
    SEEN_MAX,
    Position,
    StreamSeen,
    cursor_advance,
    cursor_for,
    cursor_move,
    cursor_store,
    event_key,
    is_duplicate,
    position_after,
)
from containers.execution.monitor.events import (
    APPLIED_ACTIONS,
    DUPLICATE,
    IGNORED,
    Look,
    batchable,
    event_apply,
    event_run_apply,
    event_state_apply,
    event_state_look,
    needs_recheck,
    on_this_engine,
)
from containers.execution.monitor.follower import (
    BACKOFF_FIRST,
    HEALTHY_STREAM,
    INBOX_MAX,
    Follower,
)
from containers.execution.monitor.loop import (
    BACKOFF_CAP,
    FOLLOWER_DB_SLOTS,
    LIMIT_NOTICE_EVERY,
    RECHECK_AFTER,
    RECHECK_FIRST,
    RECHECK_FOR,
    Monitor,
)

__all__ = [
    "APPLIED_ACTIONS",
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "CURSOR_STORE_EVERY",
    "DUPLICATE",
    "FOLLOWER_DB_SLOTS",
    "HEALTHY_STREAM",
    "IGNORED",
    "INBOX_MAX",
    "LIMIT_NOTICE_EVERY",
    "RECHECK_AFTER",
    "RECHECK_FIRST",
    "RECHECK_FOR",
    "SEEN_MAX",
    "Follower",
    "Look",
    "Monitor",
    "Position",
    "StreamSeen",
    "batchable",
    "cursor_advance",
    "cursor_for",
    "cursor_move",
    "cursor_store",
    "event_apply",
    "event_key",
    "event_run_apply",
    "event_state_apply",
    "event_state_look",
    "is_duplicate",
    "needs_recheck",
    "on_this_engine",
    "position_after",
]
