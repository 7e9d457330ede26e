"""Many requests of one kind in few transactions: the path for an actor that asks for
a batch at once (the lifecycle policies' pass), where one transaction, one commit and
two lock statements per instance would cost more than the requests themselves.

Each request is still exactly an ordinary one (``services.requests_locked``: the same
checks, the state machine's move with its history entry, one outbox row); only the
transactions are shared, ``chunk`` requests to one, and the statements: each step of the
chunk's requests is one statement for them all (``lifecycle.move_many``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from containers.models import ContainerInstance
from containers.requests.services import requests_locked
from core.errors import DomainError

# Requests per transaction: their rows stay locked until its commit (a person's stop of
# one of them waits that long: tens of milliseconds), and one commit and a few
# statements are paid for them all instead of a commit and five statements each.
CHUNK = 100

# What the caller says of one locked row: the reason and data of its history entry, or
# None when the request is no longer wanted (the rule stopped holding since the read).
Why = Callable[[ContainerInstance], "tuple[str, dict[str, Any]] | None"]


@dataclass
class BulkResult:
    """What ``container_requests_bulk`` did, by instance id: ``queued`` (a request
    written), ``unchanged`` (a repeat of one under way: nothing written), ``skipped`` (not
    asked: gone, held by another transaction, no longer matching ``rows``, or ``why``
    said no), ``refused`` (id → why the request was refused; nothing written for it)."""

    queued: list[uuid.UUID] = field(default_factory=list)
    unchanged: list[uuid.UUID] = field(default_factory=list)
    skipped: list[uuid.UUID] = field(default_factory=list)
    refused: dict[uuid.UUID, str] = field(default_factory=dict)


def container_requests_bulk(
    action: str,
    *,
    instance_ids: Iterable[uuid.UUID],
    rows: QuerySet[ContainerInstance] | None = None,
    actor: str,
    why: Why,
    chunk: int = CHUNK,
) -> BulkResult:
    """The request ``action`` (``start``, ``stop``, ``delete``) for each of
    ``instance_ids`` that is still among ``rows`` (default: any instance), by ``actor``.
    Must run outside a transaction: it makes its own, one per ``chunk`` ids.

    Per chunk, in one transaction:
    1. Lock the chunk's rows that still match ``rows`` in one statement, in id order,
       ``SKIP LOCKED``: a row another transaction holds (a request or a move at work on
       it) is skipped, never waited for, so the batch neither waits behind a person's
       request nor forms a cycle of waits with another locker; the condition is checked
       again on the row as it is now (PostgreSQL re-reads a row it locks).
    2. For each locked row: ``why(row)`` (the reason and data of its history entry, or
       None: skipped).
    3. ``requests_locked`` of the rest: the ordinary requests' checks, then their moves,
       history entries and outbox rows, a statement each for the whole chunk. A refused
       request writes nothing and the rest of the chunk goes on.
    4. Commit.

    Idempotent as the single requests are: a second call finds the rows moved on (a
    repeat is ``unchanged``, or no longer among ``rows``). An error other than a
    refusal (the database's) rolls back its chunk only and is raised; the chunks
    before it are committed.
    """
    ids = list(dict.fromkeys(instance_ids))
    base = ContainerInstance.objects.all() if rows is None else rows
    result = BulkResult()
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        with transaction.atomic():
            locked = list(
                base.filter(id__in=part)
                .select_for_update(skip_locked=True, of=("self",))
                .order_by("id")
            )
            got = {instance.id for instance in locked}
            result.skipped.extend(each for each in part if each not in got)
            asked = []
            for instance in locked:
                said = why(instance)
                if said is None:
                    result.skipped.append(instance.id)
                else:
                    asked.append((instance, *said))
            done = requests_locked(action, asked, actor=actor)
            for (instance, _, _), outcome in zip(asked, done, strict=True):
                if isinstance(outcome, DomainError):
                    result.refused[instance.id] = outcome.message
                else:
                    (result.queued if outcome.queued else result.unchanged).append(instance.id)
    return result
