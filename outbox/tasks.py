"""django-q2 entry points: thin, they receive ids and call the relay."""

from __future__ import annotations

from outbox import relay


def execute(event_id: int, token: str) -> str:
    """Run one claimed outbox row (django-q2 tries it once; the outbox owns retries)."""
    return relay.execute(event_id, token)
