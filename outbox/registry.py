"""Which handler runs each kind of outbox row, and on which worker queue.

Apps fill the registry in ``AppConfig.ready()``; the relay never imports them.

A queue may also have a claim guard (``register_claim_guard``): the relay asks it, in the
claim's transaction, which of the rows it selected it may claim now (contract §3).

A handler receives the claimed ``OutboxEvent`` and returns an ``Outcome``, or raises:
``Defer`` (not now, no attempt counted), ``PermanentFailure`` (dead at once),
``RetryLater`` (retriable, counted) or any other exception (retriable, counted, with its
traceback kept). The message of a ``PermanentFailure`` or a ``RetryLater`` is the reason
in a person's words, handed as it is to the kind's hooks (its last line, for a message of
several lines); any other exception is unexpected, and its hooks get its traceback's last
line (the class name and the message).

A kind may have two hooks, each run inside the transaction that records the outcome:
``on_dead(event, reason)`` when the row goes dead, ``on_retry(event, retry)`` when it
waits for its next attempt (``Retry``: its real schedule).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outbox.outcomes import Outcome

if TYPE_CHECKING:
    from outbox.models import OutboxEvent


class Defer(Exception):  # noqa: N818 - a signal, not an error
    """Not now (capacity denied, the target away): back to pending, no attempt counted.

    ``delay``: due again after that many seconds at the earliest (default: the relay's
    ``poll_interval``); a freed slot still makes every deferred row due at once.
    """

    def __init__(self, message: str = "", *, delay: float = 0.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentFailure(Exception):
    """Retrying cannot help: the row goes dead now."""


class RetryLater(Exception):  # noqa: N818
    """A retriable failure whose message says why in a person's words; ``retry_after``,
    when given, is a floor for the backoff (e.g. a Retry-After)."""

    def __init__(self, message: str, *, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Retry:
    """A failed attempt that will be tried again, as the relay scheduled it.

    ``attempts``: the attempts made, this one included; the row goes dead when a failure
    makes them ``max_attempts``. ``delay``: the seconds until the row is due again (its
    ``available_at``, on the database's clock). ``reason``: why it failed (see above).
    """

    attempts: int
    max_attempts: int
    delay: float
    reason: str


Handler = Callable[["OutboxEvent"], Outcome]
DeadHook = Callable[["OutboxEvent", str], None]
RetryHook = Callable[["OutboxEvent", Retry], None]
# Given the selected rows as ``(row id, aggregate id)`` in claim order, the ids that may be
# claimed now; the others are left as they were (due again at the next claim).
ClaimGuard = Callable[[Sequence[tuple[int, str]]], Collection[int]]


@dataclass(frozen=True)
class Route:
    kind: str
    queue: str
    handler: Handler
    on_dead: DeadHook | None = None
    on_retry: RetryHook | None = None


_routes: dict[str, Route] = {}
_queues: dict[str, int] = {}
_claim_guards: dict[str, ClaimGuard] = {}


def register_queue(name: str, workers: int) -> None:
    """Declare a worker queue (a django-q2 cluster) and how many workers it has."""
    _queues[name] = workers


def register(
    kind: str,
    *,
    queue: str,
    handler: Handler,
    on_dead: DeadHook | None = None,
    on_retry: RetryHook | None = None,
) -> None:
    """Route ``kind`` to ``handler`` on ``queue``; ``on_dead`` runs in the dead letter's
    transaction, ``on_retry`` in the retry's (both after the row's compare-and-set held:
    never for a stale claim). A hook that raises rolls its outcome back: the row is left
    to its lease, so a hook must only write what its outcome's transaction may."""
    if queue not in _queues:
        raise ValueError(f"unknown queue {queue!r}; register_queue() it first")
    _routes[kind] = Route(
        kind=kind, queue=queue, handler=handler, on_dead=on_dead, on_retry=on_retry
    )


def register_claim_guard(queue: str, guard: ClaimGuard) -> None:
    """Let ``guard`` decide which selected rows of ``queue`` a claim takes.

    The relay calls it inside the claim's transaction, after the rows are locked and
    before they are marked ``processing``, so what the guard reads and locks there holds
    until the claim commits. It must not write outbox rows, and must only ever lock
    what nothing that waits on a claim holds (the claim holds its rows' locks meanwhile).
    """
    if queue not in _queues:
        raise ValueError(f"unknown queue {queue!r}; register_queue() it first")
    _claim_guards[queue] = guard


def claim_guard(queue: str) -> ClaimGuard | None:
    return _claim_guards.get(queue)


def route(kind: str) -> Route | None:
    return _routes.get(kind)


def kinds() -> list[str]:
    """Every registered request kind, sorted."""
    return sorted(_routes)


def queues() -> dict[str, int]:
    """Queue name → worker count."""
    return dict(_queues)
