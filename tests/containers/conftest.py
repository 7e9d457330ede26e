"""Fixtures for the Docker integration tests (test_docker_lifecycle.py, test_monitor.py).

Without a Docker Engine they skip, or fail under CI=true ("no Docker engine: run
scripts/test-engine.sh"). Each test gets its own installation id (so its containers are
its own), a ``docker`` Runtime row, and has every container with that label removed
afterwards. A test that stops or restarts the engine uses ``private_dock``: the same on
an engine of its own (tests/private_engine.py), never the machine's.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest

from containers.engines import engine_for
from containers.engines.labels import LABEL_INSTALLATION
from containers.models import ContainerInstance, ContainerTemplate, Runtime
from tests.factories import TemplateFactory
from tests.private_engine import PrivateDockerd, missing_tools
from tests.processes import App, running_app

IMAGE = "gobrave-test-busybox:latest"
BASE_URL = "unix:///var/run/docker.sock"
HOG = 'x=$(head -c 50000000 /dev/zero | tr "\\0" a); echo survived'
# Exits 0 on SIGTERM (sent by the test through the SDK), i.e. "exits on its own".
EXIT_ON_TERM = 'trap "exit 0" TERM; while true; do sleep 0.1; done'
FAST = {
    "container_reconcile_interval": "2",
    "container_stop_timeout": "1",
    "outbox_poll_interval": "0.2",
    "outbox_backoff_base": "0.3",
    "queue_poll": "0.05",
}


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def docker_client() -> Iterator[docker.APIClient]:
    """The bare SDK, for what gobrave must not do itself (pause, rm -f, orphans)."""
    try:
        client = docker.APIClient(base_url=BASE_URL, version="auto", timeout=30)
        client.ping()
    except Exception:  # noqa: BLE001 - any failure means no usable engine
        _unavailable("no Docker engine: run scripts/test-engine.sh")
    try:
        client.inspect_image(IMAGE)
    except docker.errors.NotFound:
        _unavailable(f"no {IMAGE} image: run scripts/test-engine.sh")
    yield client
    client.close()


@dataclass
class Dock:
    """One test's Docker setup: its installation id, its Runtime row and the SDK."""

    installation: str
    runtime: Runtime
    client: docker.APIClient
    tmp_path: Path
    engine: PrivateDockerd | None = None  # a private engine's, for private_dock

    def template(self, command: str | list[str], **fields) -> ContainerTemplate:
        """A template running ``command``: a list of words, or a shell line (sh -c)."""
        if isinstance(command, str):
            command = ["sh", "-c", command]
        fields.setdefault("name", f"t-{uuid.uuid4().hex[:8]}")
        fields.setdefault("constraints", {"engine": "docker"})
        fields.setdefault("image", IMAGE)
        fields.setdefault("pull_policy", "never")
        return TemplateFactory(command=command, **fields)

    def app(self, **overrides: str) -> AbstractContextManager[App]:
        """A ``running_app`` that shares this test's installation id and fast timings."""
        return running_app(
            self.tmp_path,
            container_installation_id=self.installation,
            **{**FAST, **overrides},
        )

    @contextmanager
    def pipeline(self, **overrides: str) -> Iterator[App]:
        """Dispatcher, create and control clusters and the monitor, all running."""
        with self.app(**overrides) as app:
            app.dispatcher()
            app.cluster("create")
            app.cluster("control")
            app.monitor()
            yield app

    def containers(self, **filters: str) -> list[dict]:
        label = f"{LABEL_INSTALLATION}={self.installation}"
        return self.client.containers(all=True, filters={"label": label, **filters})

    def engine_state(self, instance: ContainerInstance) -> dict | None:
        try:
            return self.client.inspect_container(f"gb-{instance.pk}")["State"]
        except docker.errors.NotFound:
            return None


def _dock_on(client, base_url: str, gobrave_config, tmp_path: Path, **extra) -> Dock:
    installation = f"test-{uuid.uuid4().hex[:12]}"
    gobrave_config(container={"installation_id": installation, "stop_timeout": 1})
    Runtime.objects.all().delete()  # the migration's "local" row would double every engine
    runtime = Runtime.objects.create(
        name="docker", driver="docker", base_url=base_url, labels={"engine": "docker"}
    )
    return Dock(installation, runtime, client, tmp_path, **extra)


@pytest.fixture
def dock(docker_client, postgres, gobrave_config, tmp_path) -> Iterator[Dock]:
    dock = _dock_on(docker_client, BASE_URL, gobrave_config, tmp_path)
    yield dock
    label = f"{LABEL_INSTALLATION}={dock.installation}"
    for container in docker_client.containers(all=True, filters={"label": label}):
        docker_client.remove_container(container["Id"], force=True)
    # Workspaces (volumes) and owner networks this test's instances made.
    for volume in docker_client.volumes(filters={"label": label}).get("Volumes") or []:
        docker_client.remove_volume(volume["Name"], force=True)
    for network in docker_client.networks(filters={"label": label}):
        docker_client.remove_network(network["Id"])


@contextmanager
def _private_dock(gobrave_config, tmp_path: Path, engine: PrivateDockerd) -> Iterator[Dock]:
    if reason := missing_tools():
        _unavailable(reason)
    try:
        engine.start()
        engine.load_image(IMAGE)
        with engine.client() as client:
            yield _dock_on(client, engine.url, gobrave_config, tmp_path, engine=engine)
    finally:
        engine.destroy()


@pytest.fixture
def private_dock(docker_client, postgres, gobrave_config, tmp_path) -> Iterator[Dock]:
    """A ``Dock`` on a private dockerd without ``--live-restore`` (stopping it stops its
    containers), with the test image; the engine and all it holds go afterwards."""
    engine = PrivateDockerd("test", live_restore=False)
    with _private_dock(gobrave_config, tmp_path, engine) as dock:
        yield dock


@pytest.fixture
def gated_dock(docker_client, postgres, gobrave_config, tmp_path) -> Iterator[Dock]:
    """A ``Dock`` on a private dockerd with ``--live-restore`` whose task creates a test
    can hold (``PrivateDockerd(gated_runtime=True)``): a start stays in flight while the
    test restarts the daemon."""
    engine = PrivateDockerd("gated", live_restore=True, gated_runtime=True)
    with _private_dock(gobrave_config, tmp_path, engine) as dock:
        yield dock


@pytest.fixture
def pipeline(dock) -> Iterator[App]:
    """Dispatcher, create and control clusters and the monitor, all running."""
    with dock.pipeline() as app:
        yield app


@pytest.fixture
def engine(fake_runtime):
    """The fake engine behind ``fake_runtime`` (a directory every process shares)."""
    return engine_for(fake_runtime)


@pytest.fixture
def only_test_runtimes(request):
    """The migration's ``local`` row points at the real engine: keep fake-engine tests
    off it (a module asks for it with ``pytest.mark.usefixtures``; docker tests keep it)."""
    if request.node.get_closest_marker("django_db") and "docker" not in request.keywords:
        Runtime.objects.filter(name="local").delete()
