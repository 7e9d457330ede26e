"""django-q2 entry points: thin, they receive ids and call the relay."""

from __future__ import annotations

from django.db import InterfaceError, OperationalError, connection
from django_q.conf import Conf

from outbox import chain, conf


def execute(event_id: int, token: str) -> str:
    """Run one claimed outbox row (django-q2 tries it once; the outbox owns retries), then
    the rows its worker claims with each outcome while this task's timeout allows
    (``outbox.chain``)."""
    try:
        conf.worker_session(connection)
    except (InterfaceError, OperationalError):
        connection.close()  # dead since the last task: ``begin`` opens a fresh one
    return chain.execute(event_id, token, budget=conf.chain_budget(Conf.TIMEOUT))
