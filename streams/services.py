"""Opening, keeping and closing a stream: its lease, and the access check it renews.

A stream holds one ``core.models.Lease`` row (scope ``stream``, holder ``user:<id>``)
for as long as it is open; the rows are the count the limits read, across every web
process and host (``streams.per_user``, ``streams.total`` in ``config.yml``). A row
expires ``streams.lease_seconds`` after its last renewal, so a web process that dies
leaks nothing for longer than that.

Every function here is synchronous and short; the async side calls it through
``streams.guard.db_call``, which gives the thread's connection back to the pool at once
(a stream holds no database connection while it waits).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from core.errors import LeaseLimitReached
from core.leases import LeaseScope, lease_acquire, lease_release, lease_renew
from streams.errors import StreamLimitReached
from streams.viewers import Viewer, viewer_user

SCOPE = LeaseScope.STREAM

# What a stream's access rule answers: None when the user may go on watching, else why not.
AccessRule = Callable[[object], str | None]


def stream_config() -> dict:
    return settings.GOBRAVE["streams"]


def stream_stall_seconds() -> float:
    """How long a stream waits for its client to take a chunk before dropping it:
    ``streams.stall_seconds``, else a third of ``streams.lease_seconds``. While a write
    waits, the stream renews nothing; at most half a lease (``core.config``), its lease
    outlives the wait."""
    config = stream_config()
    return config["stall_seconds"] or config["lease_seconds"] / 3


def stream_open(*, viewer: Viewer) -> int:
    """Take a place for a new stream of ``viewer``; return its lease id.

    Raises ``StreamLimitReached`` (429, nothing written) when the viewer already holds
    ``streams.per_user`` open streams, or everyone together ``streams.total``. Exact under
    concurrency (``core.leases.lease_acquire`` counts and inserts under one lock).
    """
    config = stream_config()
    try:
        lease = lease_acquire(
            scope=SCOPE,
            holder=f"user:{viewer.user_id}",
            ttl=config["lease_seconds"],
            per_holder=config["per_user"],
            total=config["total"],
        )
    except LeaseLimitReached as exc:
        if exc.limit == "per_holder":
            message = (
                f"you have {exc.number} streams open, the most one user may hold; "
                "close one (a browser tab, a follow) and try again"
            )
        else:
            message = f"the server holds {exc.number} open streams, its limit; try again later"
        raise StreamLimitReached(
            message,
            retry_after=max(1.0, config["lease_seconds"] / 3),
            limit=exc.limit,
            number=exc.number,
        ) from None
    return lease.pk


def stream_keep(*, lease_id: int, viewer: Viewer, allowed: AccessRule) -> str | None:
    """Renew the stream's lease and ask again whether its viewer may go on; None when the
    stream goes on, else the reason it must end (said to the viewer).

    1. Renew the lease; a lease already gone (expired and reaped) ends the stream.
    2. Authenticate the viewer's credentials again (``viewer_user``).
    3. Ask the stream's own rule (``allowed``, given the user) whether they may still see
       what they watch (their permission, the object still there).
    """
    if not lease_renew(lease_id=lease_id, ttl=stream_config()["lease_seconds"]):
        return "the stream's lease expired"
    user = viewer_user(viewer)
    if user is None:
        return "your login or token is no longer valid"
    return allowed(user)


def stream_close(*, lease_id: int) -> None:
    """Give the stream's place back (idempotent)."""
    lease_release(lease_id=lease_id)
