"""Runtime factory: one runtime object per engine per process (never across fork)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from containers.runtime.base import ContainerRuntime

if TYPE_CHECKING:
    from containers.models import Runtime

_cache: dict[tuple[int, str, str], ContainerRuntime] = {}


def runtime_for(runtime: Runtime) -> ContainerRuntime:
    """The runtime implementation for a ``Runtime`` row, cached per process."""
    key = (os.getpid(), runtime.driver, runtime.base_url)
    if key not in _cache:
        if runtime.driver == "fake":
            from containers.runtime.fake import FakeRuntime

            _cache[key] = FakeRuntime(runtime.base_url)
        else:
            from containers.runtime.docker import DockerRuntime

            _cache[key] = DockerRuntime(runtime.base_url)
    return _cache[key]
