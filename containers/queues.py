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
    def queue(self) -> Queue:
        """The queue whose workers run this kind."""
        return Queue.CREATE if self in (RequestKind.CREATE, RequestKind.START) else Queue.CONTROL
