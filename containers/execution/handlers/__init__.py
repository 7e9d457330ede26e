"""Outbox handlers for container requests, registered with the relay at start.

Each handler follows the same steps:
1. Lock the instance and check its state matches the request; if not, the request is
   superseded (a queued create whose instance is now ``delete_pending``). Create and
   start pass the global capacity gate here or ``Defer``.
2. Commit, then call the engine with no transaction open.
3. Lock again, inspect what the engine did and apply it.
Replayed after success, every handler finds the state moved on and changes nothing.

Where what lives:
- ``begin``: step 1 (``_begin``), with the wait for an engine recorded unreachable.
- ``container``: what a handler hands its engine (the spec, the container's reference,
  whether a container is the instance's) and what a create or start prepares first.
- ``apply``: step 3 (``_apply``) and the clean-ups a stale or superseded worker records.
- ``create``: the create's handler and its own steps (``_record_created``, a stale
  container replaced, an abandoned create's container removed).
- ``control``: the start, stop and delete handlers.
- ``registration``: ``register`` (the relay's queues, claim guard and handlers), the
  engine errors mapped onto the relay's, and ``on_dead`` / ``on_retry``.
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up.
"""

from containers.execution.handlers.apply import _apply
from containers.execution.handlers.begin import ENGINE_AWAY_RECHECK_SECONDS, _begin
from containers.execution.handlers.container import _spec
from containers.execution.handlers.control import handle_delete, handle_start, handle_stop
from containers.execution.handlers.create import _record_created, handle_create
from containers.execution.handlers.registration import (
    HANDLERS,
    REQUEST_STATES,
    on_dead,
    on_retry,
    register,
    retrying_reason,
)

__all__ = [
    "ENGINE_AWAY_RECHECK_SECONDS",
    "HANDLERS",
    "REQUEST_STATES",
    "_apply",
    "_begin",
    "_record_created",
    "_spec",
    "handle_create",
    "handle_delete",
    "handle_start",
    "handle_stop",
    "on_dead",
    "on_retry",
    "register",
    "retrying_reason",
]
