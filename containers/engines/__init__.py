"""Engines: the objects that talk to container engines (the one seam to Docker).

Vocabulary, used the same way in every module: a ``Runtime`` is a database row (where
gobrave may schedule); an *engine* is the object that talks to the daemon behind that
row, got with ``engine_for(runtime)``. One engine object per daemon per process (never
shared across fork).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from django.conf import settings

from containers.engines.base import Engine, PermanentEngineError

if TYPE_CHECKING:
    from containers.models import Runtime

_cache: dict[tuple[int, str, str, tuple[str, str, str] | None], Engine] = {}


def fake_driver_allowed() -> bool:
    """The ``fake`` driver (an engine simulated in files) only where the settings allow it:
    the test and bench settings modules do; gobrave's own never does."""
    return bool(getattr(settings, "GOBRAVE_FAKE_RUNTIME", False))


def engine_for(runtime: Runtime) -> Engine:
    """The engine behind a ``Runtime`` row, cached per process (and per daemon).

    A ``fake`` row outside tests raises ``PermanentEngineError`` (nothing runs on it). A
    row with TLS files reaches its engine over mutual TLS with them (``TLSFiles``): its
    certificate verified against that CA alone, whatever the environment says.
    """
    key = (os.getpid(), runtime.driver, runtime.base_url, runtime.tls_files)
    if runtime.driver == "fake" and not fake_driver_allowed():
        raise PermanentEngineError(
            f"runtime {runtime.name}: the fake driver is for tests only (GOBRAVE_FAKE_RUNTIME)"
        )
    if key not in _cache:
        if runtime.driver == "fake":
            from containers.engines.fake import FakeEngine

            _cache[key] = FakeEngine(runtime.base_url)
        else:
            from containers.engines.docker import DockerEngine, TLSFiles

            tls = TLSFiles(*runtime.tls_files) if runtime.tls_files else None
            _cache[key] = DockerEngine(runtime.base_url, tls=tls)
    return _cache[key]
