"""The worker queues and the request kinds that run on them, side by side (contract §2 and 4).

A request kind is the ``kind`` of its ``OutboxEvent`` and of the ``ContainerEvent`` that
records it; each kind runs on one queue (a django-q2 cluster of the same name, wired in
``gobrave.settings``).
"""

from __future__ import annotations

import enum


class Queue(enum.StrEnum):
    CREATE = "create"  # create and start, create_queue_max_concurrency workers
    CONTROL = "control"  # stop and delete, so they never wait behind slow creates


class RequestKind(enum.StrEnum):
    CREATE = "ContainerCreateRequest"
    START = "ContainerStartRequest"
    STOP = "ContainerStopRequest"
    DELETE = "ContainerDeleteRequest"

    @property
    def verb(self) -> str:
        """The request as a person names it: ``create``, ``start``, ``stop``, ``delete``."""
        return self.name.lower()

    @property
    def queue(self) -> Queue:
        """The queue whose workers run this kind."""
        return Queue.CREATE if self in (RequestKind.CREATE, RequestKind.START) else Queue.CONTROL


# What each kind of an instance's history entry (``ContainerEvent.kind``) is called on
# pages, in the API's ``kind_display`` and in the commands' output; programs keep ``kind``.
EVENT_KIND_WORDS: dict[str, str] = {
    RequestKind.CREATE: "create requested",
    RequestKind.START: "start requested",
    RequestKind.STOP: "stop requested",
    RequestKind.DELETE: "delete requested",
    "ContainerDeleted": "deleted",
    "transition": "state changed",
    "runtime": "seen on the engine",
    "cleanup": "cleaned up",
    "dead_letter": "request given up",
    "retry": "request retried",
    "start_timeout": "start timed out",
    "orphan": "orphan found",
    "renamed": "renamed",  # migration 0013: a duplicate name of its owner's
    "decommission": "engine decommissioned",
}


def event_kind_display(kind: str) -> str:
    """``kind`` in words (a kind without an entry: its underscores as spaces)."""
    return EVENT_KIND_WORDS.get(kind, kind.replace("_", " "))
