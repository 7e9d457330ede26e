"""Retention: what gobrave keeps, deleted when it is old enough, in short batches.

Each app registers the purges of its own tables (``register_purge``, from its
``AppConfig.ready()``): a function that deletes one kind of row past its age, ``batch``
rows per statement (``core.batches.delete_in_batches``), and returns how many went. The
dispatcher runs them all every ``retention.interval`` (``retention_run``), as does
``manage.py retention_purge``. Ages are in ``config.yml``: ``outbox.retention`` (sent
outbox rows) and the ``retention`` section (``docs/operations.md``, "Retention").

Registered today: ``outbox.sent`` and ``outbox.dead_letters_resolved`` (the outbox),
``containers.deleted_instance_history`` and ``containers.engine_history`` (both off by
default), ``webhooks.deliveries``
(finished deliveries, ``retention.webhook_deliveries``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from django.conf import settings

log = logging.getLogger(__name__)

Purge = Callable[[int], int]  # batch size -> rows deleted

_purges: dict[str, Purge] = {}


def register_purge(name: str, purge: Purge) -> None:
    """Register ``purge(batch) -> deleted`` under ``name`` (``<app>.<what>``); the same
    name again replaces it (``ready()`` may run twice)."""
    _purges[name] = purge


def registered() -> list[str]:
    return sorted(_purges)


def retention_age(key: str) -> dt.timedelta | None:
    """``retention.<key>`` from config.yml as an age, or None when the key is empty
    (keep forever)."""
    seconds = settings.GOBRAVE["retention"][key]
    return None if seconds is None else dt.timedelta(seconds=seconds)


def retention_run(*, batch: int | None = None) -> dict[str, int]:
    """Run every registered purge once; ``{name: rows deleted}``.

    Must run outside a transaction (each batch commits on its own). A purge that fails
    is logged and the others still run; it is tried again next time. Idempotent: two
    processes running it at once delete each row once (the second finds it gone).
    """
    size = batch or settings.GOBRAVE["retention"]["batch_size"]
    done: dict[str, int] = {}
    for name in registered():
        try:
            done[name] = _purges[name](size)
        except Exception:
            log.exception("retention: purge %s failed; it runs again next time", name)
            continue
        if done[name]:
            log.info("retention: %s deleted %s rows", name, done[name])
    return done
