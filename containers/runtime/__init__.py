"""Runtime factory: one runtime object per engine per process (never across fork)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from django.conf import settings

from containers.runtime.base import ContainerRuntime, PermanentRuntimeError

if TYPE_CHECKING:
    from containers.models import Runtime

_cache: dict[tuple[int, str, str], ContainerRuntime] = {}


def fake_driver_allowed() -> bool:
    """The ``fake`` driver (an engine simulated in files) only where the settings allow it:
    the test and bench settings modules do; gobrave's own never does."""
    return bool(getattr(settings, "GOBRAVE_FAKE_RUNTIME", False))


def runtime_for(runtime: Runtime) -> ContainerRuntime:
    """The runtime implementation for a ``Runtime`` row, cached per process.

    A ``fake`` row outside tests raises ``PermanentRuntimeError`` (nothing runs on it).
    """
    key = (os.getpid(), runtime.driver, runtime.base_url)
    if runtime.driver == "fake" and not fake_driver_allowed():
        raise PermanentRuntimeError(
            f"runtime {runtime.name}: the fake driver is for tests only (GOBRAVE_FAKE_RUNTIME)"
        )
    if key not in _cache:
        if runtime.driver == "fake":
            from containers.runtime.fake import FakeRuntime

            _cache[key] = FakeRuntime(runtime.base_url)
        else:
            from containers.runtime.docker import DockerRuntime

            _cache[key] = DockerRuntime(runtime.base_url)
    return _cache[key]
