"""The container state machine, defined once (contract §1).

``TRANSITIONS`` is the contract's table; the model's django-fsm transitions are built
from it, and nothing else decides which moves are allowed.
"""

from __future__ import annotations

from django.db import models


class Status(models.TextChoices):
    PENDING = "pending"
    CREATING = "creating"
    RUNNING = "running"
    PAUSED = "paused"
    STOP_PENDING = "stop_pending"
    STOPPING = "stopping"
    STOPPED = "stopped"
    START_PENDING = "start_pending"
    STARTING = "starting"
    DELETE_PENDING = "delete_pending"
    DELETING = "deleting"
    FAILED = "failed"


S = Status

TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.CREATING, S.FAILED, S.DELETE_PENDING}),
    S.CREATING: frozenset({S.RUNNING, S.FAILED, S.STOPPED, S.DELETE_PENDING}),
    S.RUNNING: frozenset(
        {S.STOPPED, S.STOP_PENDING, S.START_PENDING, S.DELETE_PENDING, S.PAUSED, S.FAILED}
    ),
    S.PAUSED: frozenset(
        {S.RUNNING, S.STOPPED, S.STOP_PENDING, S.START_PENDING, S.DELETE_PENDING, S.FAILED}
    ),
    S.STOP_PENDING: frozenset({S.STOPPING, S.DELETE_PENDING, S.FAILED}),
    S.STOPPING: frozenset({S.STOPPED, S.DELETE_PENDING, S.FAILED}),
    # A waiting start may be cancelled (stopped) or deleted by its user: it may wait for
    # its engine (full, disabled, away) indefinitely.
    S.START_PENDING: frozenset({S.STARTING, S.STOP_PENDING, S.DELETE_PENDING, S.FAILED}),
    S.STARTING: frozenset({S.RUNNING, S.DELETE_PENDING, S.FAILED}),
    S.DELETE_PENDING: frozenset({S.DELETING, S.FAILED}),
    S.DELETING: frozenset({S.STOPPED, S.FAILED}),
    S.STOPPED: frozenset({S.RUNNING, S.START_PENDING, S.DELETE_PENDING}),
    S.FAILED: frozenset({S.DELETE_PENDING}),
}

# States that hold a create/start slot (maxConcurrency counts these).
ACTIVE_SLOTS = frozenset({S.CREATING, S.STARTING})
# States whose instance is on its way out (max_instances_per_owner does not count them).
BEING_DELETED = frozenset({S.DELETE_PENDING, S.DELETING})
# States whose instance holds no place on its engine (``Runtime.max_containers`` counts every
# other): not placed yet, or on its way out.
PLACE_FREE = frozenset({S.PENDING, S.DELETE_PENDING, S.DELETING})
# States in which nothing happens until someone asks for something.
RESTING = frozenset({S.RUNNING, S.PAUSED, S.STOPPED, S.FAILED})
# States with a request queued or in flight.
IN_FLIGHT = frozenset(set(Status) - RESTING)


def sources_of(target: str) -> list[str]:
    """Every state from which ``target`` may be reached, in declaration order."""
    return [source for source in Status if target in TRANSITIONS[source]]


def can_move(source: str, target: str) -> bool:
    return target in TRANSITIONS.get(source, frozenset())


# --- what the operator console offers (presentation of contract §2, not a second contract) ----
# A request is offered where it changes something. Where its goal is reached or already
# under way there is nothing to do (contract §2 also accepts a start of a running instance,
# which only cycles its states, so the console does not offer it). Anywhere else the
# service refuses it, with the reason.
OFFERED: dict[str, frozenset[str]] = {
    "start": frozenset({S.PAUSED, S.STOPPED}),
    "stop": frozenset({S.RUNNING, S.PAUSED, S.START_PENDING}),
    "delete": frozenset(sources_of(S.DELETE_PENDING)),
}
NOTHING_TO_DO: dict[str, frozenset[str]] = {
    "start": frozenset({S.RUNNING, S.START_PENDING, S.STARTING}),
    "stop": frozenset({S.STOP_PENDING, S.STOPPING, S.STOPPED, S.FAILED}),
    "delete": frozenset({S.DELETE_PENDING, S.DELETING}),
}
