"""Engines: the objects that talk to container engines (the one seam to Docker and
Kubernetes).

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

_cache: dict[tuple, Engine] = {}


def fake_driver_allowed() -> bool:
    """The ``fake`` driver (an engine simulated in files) only where the settings allow it:
    the test and bench settings modules do; gobrave's own never does."""
    return bool(getattr(settings, "GOBRAVE_FAKE_RUNTIME", False))


def driver_class(driver: str) -> type:
    """The engine class of ``driver``: its declared capabilities (``stop_removes``,
    ``honours_node_constraints``), read without making an engine."""
    if driver == "kubernetes":
        from containers.engines.kubernetes import KubernetesEngine

        return KubernetesEngine
    if driver == "fake":
        from containers.engines.fake import FakeEngine

        return FakeEngine
    from containers.engines.docker import DockerEngine

    return DockerEngine


def preload_in_cluster() -> None:
    """In a django-q2 cluster's main process: import the Docker driver (the docker SDK,
    ``requests``, ``cryptography.x509``) before the workers fork from it, so that each
    worker does not import them again on its first request, inside the request's time.
    Other drivers load where they are used (the Kubernetes client is heavy and rare)."""
    import containers.engines.docker  # noqa: F401 - imported for the forks to inherit


def engine_for(runtime: Runtime) -> Engine:
    """The engine behind a ``Runtime`` row, cached per process (and per daemon).

    A ``fake`` row outside tests raises ``PermanentEngineError`` (nothing runs on it). A
    row with TLS files reaches its engine over mutual TLS with them (``TLSFiles``): its
    certificate verified against that CA alone, whatever the environment says.
    """
    key: tuple = (os.getpid(), runtime.driver, runtime.base_url, runtime.tls_files)
    if runtime.driver == "kubernetes":
        from containers.engines.kubernetes import KubeTarget

        target = KubeTarget(**runtime.kube_target)
        key = (os.getpid(), runtime.driver, target)
    if runtime.driver == "fake" and not fake_driver_allowed():
        raise PermanentEngineError(
            f"runtime {runtime.name}: the fake driver is for tests only (GOBRAVE_FAKE_RUNTIME)"
        )
    if key not in _cache:
        if runtime.driver == "fake":
            from containers.engines.fake import FakeEngine

            _cache[key] = FakeEngine(runtime.base_url)
        elif runtime.driver == "kubernetes":
            from containers.engines.kubernetes import KubernetesEngine

            _cache[key] = KubernetesEngine(target)
        else:
            from containers.engines.docker import DockerEngine, TLSFiles

            tls = TLSFiles(*runtime.tls_files) if runtime.tls_files else None
            _cache[key] = DockerEngine(runtime.base_url, tls=tls)
    return _cache[key]
