"""How a django-q2 worker stops when it gets SIGTERM in the middle of a handler.

django-q2 leaves its workers SIGTERM's default action (die at once). Sent to a whole
process group (a process manager stopping everything), that kills a handler between
its runtime call and its outcome. Instead, in every worker (``post_spawn``):
1. SIGTERM while idle: exit at once, as before.
2. SIGTERM while a handler runs: note it and let the handler go on; its outcome is
   recorded as usual (the relay's outcome writes have their own timeout), then the
   worker exits. If the handler has not returned within ``outbox.stop_grace`` seconds,
   the worker exits without an outcome: the row is left to its lease (the liveness
   timeout), never marked done before its runtime call returned.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

log = logging.getLogger(__name__)

_busy = threading.Event()
_asked = threading.Event()


def _on_sigterm(_signum, _frame) -> None:
    if not _busy.is_set():
        os._exit(0)
    if _asked.is_set():
        return
    _asked.set()
    grace = float(settings.OUTBOX["stop_grace"])
    log.warning("worker %s: SIGTERM mid-handler; finishing within %gs", os.getpid(), grace)
    timer = threading.Timer(grace, _give_up, args=(grace,))
    timer.daemon = True
    timer.start()


def _flush_counters() -> None:
    from core.counters import counters_flush

    try:
        counters_flush()
    except Exception:  # noqa: BLE001 - exiting anyway; counters are statistics
        log.warning("worker %s: counters not flushed", os.getpid(), exc_info=True)


def _give_up(grace: float) -> None:
    log.error("worker %s: handler still running %gs after SIGTERM; exiting", os.getpid(), grace)
    os._exit(1)


def asked() -> bool:
    """Whether this worker got SIGTERM while a handler ran (it exits after the outcome)."""
    return _asked.is_set()


def install_in_worker(**_kwargs) -> None:
    """``post_spawn`` receiver: this process is a django-q2 worker."""
    signal.signal(signal.SIGTERM, _on_sigterm)


@contextmanager
def handling() -> Iterator[None]:
    """Around one handler and its outcome; exits afterwards if SIGTERM came meanwhile."""
    _busy.set()
    try:
        yield
    finally:
        _busy.clear()
        if _asked.is_set():
            log.warning("worker %s: outcome recorded after SIGTERM; exiting", os.getpid())
            _flush_counters()
            os._exit(0)
