"""Relay hooks (retry, dead, error): structured log lines, plus any subscriber.

Subscribers must be quick and must not raise; a raising subscriber is logged and
skipped, never allowed to change an outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("outbox.hooks")
_subscribers: dict[str, list[Callable[..., None]]] = {"retry": [], "dead": [], "error": []}


def subscribe(name: str, callback: Callable[..., None]) -> None:
    _subscribers[name].append(callback)


def emit(name: str, *, event: Any, **details: Any) -> None:
    error = str(details.get("error", "")).strip().splitlines()
    log.warning(
        "outbox %s id=%s kind=%s aggregate=%s attempts=%s delay=%s error=%r",
        name,
        event.id,
        event.kind,
        event.aggregate_id,
        details.get("attempts", event.attempts),
        round(details["delay"], 3) if "delay" in details else "-",
        error[-1] if error else "",
    )
    for callback in _subscribers[name]:
        try:
            callback(event=event, **details)
        except Exception:  # noqa: BLE001 - a hook never changes an outcome
            log.exception("outbox hook %s failed", name)
