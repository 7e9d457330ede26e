"""Creates whose image comes from a registry, on the real engine: each failure says why.

A registry of our own on loopback (Debian's ``docker-registry``, installed by
``scripts/test-services.sh``; its system service is never used): the module starts
``docker-registry serve`` on a free 127.0.0.1 port with a temporary storage directory and
pushes the FROM-scratch test image to it. The engine treats 127.0.0.0/8 registries as
insecure, so it speaks plain HTTP to it. No test here makes the engine pull from anything
but this registry, or a loopback port where nothing listens.

The outcomes that need no process run the relay in the test's own process (one claim and
its attempt, on the real engine); the timed ones run a real create cluster, started
before the create, so their bounds (10 s, 5 s, scaled like every wait of the suite)
measure the request, not a process's start.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import docker.errors
import pytest

from containers.engines.base import EngineError, PermanentEngineError
from containers.engines.docker import pull_error
from containers.errors import InvalidSpec
from containers.models import ContainerEvent, ContainerInstance
from containers.requests.services import container_create_by_template
from outbox.models import OutboxEvent
from tests.containers.conftest import IMAGE, _unavailable
from tests.processes import (
    PATIENCE,
    App,
    free_port,
    http_answers,
    outbox_rows,
    relay_drain,
    wait_for,
)

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:<port>
    image: str  # the test image as pushed there, absent from the engine's store


@pytest.fixture(scope="module")
def registry(docker_client, tmp_path_factory) -> Iterator[Registry]:
    """``docker-registry serve`` on a free loopback port, holding the test image."""
    binary = shutil.which("docker-registry")
    if binary is None:
        _unavailable("no docker-registry: run scripts/test-services.sh")
    root = tmp_path_factory.mktemp("registry")
    host = f"127.0.0.1:{free_port()}"
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
        f"http: {{addr: '{host}', secret: gobrave-test}}\n"
    )
    log = (root / "registry.log").open("wb")
    process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    image = f"{host}/gobrave-test:1"
    try:
        wait_for(
            lambda: http_answers(f"http://{host}/v2/") or process.poll() is not None,
            timeout=10,
            message=f"the registry answering on {host}",
        )
        assert process.poll() is None, _tail(root / "registry.log")
        docker_client.tag(IMAGE, f"{host}/gobrave-test", tag="1")
        pushed = list(docker_client.push(f"{host}/gobrave-test", tag="1", stream=True, decode=True))
        assert not [line for line in pushed if "error" in line], pushed
        docker_client.remove_image(image)  # only the registry holds it now
        yield Registry(host=host, image=image)
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
        with suppress(docker.errors.NotFound):
            docker_client.remove_image(image)


def _tail(path: Path) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-20:])


@contextmanager
def _create_cluster(dock, **overrides: str) -> Iterator[App]:
    """The create queue's django-q2 cluster: its pusher claims the create's row itself
    (woken by the commit, or at its first read), so a create needs no dispatcher."""
    with dock.app(**overrides) as app:
        app.cluster("create")
        yield app


def _create(dock, owner, image: str) -> ContainerInstance:
    template = dock.template(["sleep", "60"], image=image, pull_policy="if_not_present")
    return container_create_by_template(template=template, owner=owner, actor="test")


def _said(instance) -> str:
    row = ContainerInstance.objects.get(pk=instance.pk)
    return f"{row.status} {row.status_reason!r}\n{outbox_rows()}"


def test_an_image_pushed_to_the_registry_is_pulled_and_runs(dock, registry, owner):
    instance = _create(dock, owner, registry.image)
    assert relay_drain() == ["sent"], _said(instance)
    assert ContainerInstance.objects.get(pk=instance.pk).status == "running", _said(instance)
    assert registry.image in dock.client.inspect_image(registry.image)["RepoTags"]


def test_a_typo_image_fails_at_once_with_the_registry_s_message(dock, registry, owner):
    typo = f"{registry.host}/nosuch:1"
    instance = _create(dock, owner, typo)
    assert relay_drain() == ["dead"], _said(instance)  # the first attempt, no retry
    stored, row = ContainerInstance.objects.get(pk=instance.pk), OutboxEvent.objects.get()
    reason = stored.status_reason
    assert stored.status == "failed", _said(instance)
    assert reason.startswith(f"create failed: cannot pull image {typo}: "), _said(instance)
    assert "manifest unknown" in reason, _said(instance)  # the registry's own words
    assert (row.status, row.attempts) == ("dead", 1), _said(instance)
    failed = ContainerEvent.objects.get(instance_id=instance.pk, to_status="failed")
    assert failed.message == reason, failed.message
    assert dock.containers() == []


def test_an_invalid_reference_is_refused_by_the_request_and_never_reaches_the_engine(dock, owner):
    with pytest.raises(InvalidSpec, match="is not an image reference"):
        _create(dock, owner, "127.0.0.1:5000/Not_Lower:1")
    assert not ContainerInstance.objects.exists() and not OutboxEvent.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_registry_nobody_listens_on_shows_retrying_with_the_row_s_schedule(dock, owner):
    nowhere = f"127.0.0.1:{free_port()}/x:1"
    # A retry waits 30 s or more: the test sees exactly one attempt.
    with _create_cluster(dock, outbox_backoff_base="30", outbox_max_attempts="8") as app:
        app.wait_logged("create-cluster", "running.", timeout=60, message="the cluster up")
        instance = _create(dock, owner, nowhere)
        wait_for(
            lambda: ContainerInstance.objects.get(pk=instance.pk).status_reason.startswith(
                "retrying"
            ),
            timeout=5,
            message="the retrying reason",
            describe=lambda: _said(instance),
        )
    stored, row = ContainerInstance.objects.get(pk=instance.pk), OutboxEvent.objects.get()
    entry = ContainerEvent.objects.get(instance_id=instance.pk, kind="retry")
    shown = re.fullmatch(
        rf"retrying \(attempt 1 of 8\): cannot pull image {re.escape(nowhere)}: "
        r".*connection refused.*, next try in (\d+) s",
        stored.status_reason,
    )
    assert shown, _said(instance)
    assert (stored.status, row.status, row.attempts) == ("creating", "pending", 1), _said(instance)
    assert int(shown[1]) == round(entry.data["delay"]) and 30 <= entry.data["delay"] <= 45, entry
    assert entry.message == stored.status_reason


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_create_wait_exits_non_zero_printing_why(dock, registry, owner):
    """End to end through a real create cluster: a typo image fails within 10 s (the
    command's own ``--timeout``, scaled like every wait of the suite), and ``--wait``
    exits 1 printing the registry's message."""
    typo = f"{registry.host}/nosuch:1"
    template = dock.template(["sleep", "60"], image=typo, pull_policy="if_not_present")
    with _create_cluster(dock) as app:
        app.wait_logged("create-cluster", "running.", timeout=60, message="the cluster up")
        done = app.manage(
            "container_create",
            "--template",
            template.name,
            "--user",
            owner.username,
            "--wait",
            "--timeout",
            str(10 * PATIENCE),
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"ended failed: create failed: cannot pull image {typo}: " in done.stderr, done.stderr
    assert "manifest unknown" in done.stderr, done.stderr
    assert "creating → failed" in done.stdout, done.stdout
    row = OutboxEvent.objects.get()
    assert (row.status, row.attempts) == ("dead", 1), outbox_rows()


@pytest.mark.parametrize(
    ("message", "permanent"),
    [
        ("manifest for r/x:1 not found: manifest unknown: manifest unknown (HTTP 404)", True),
        ("repository r/x not found: name unknown: repository name not known to registry", True),
        ("pull access denied for x, repository does not exist or may require 'docker login'", True),
        ("invalid reference format: repository name must be lowercase (HTTP 400)", True),
        ('Get "http://127.0.0.1:9/v2/": dial tcp 127.0.0.1:9: connect: connection refused', False),
        ("dial tcp: lookup registry.invalid on 10.0.0.53:53: no such host (HTTP 500)", False),
        ("net/http: request canceled while waiting for connection (Client.Timeout)", False),
    ],
)
def test_a_pull_error_is_permanent_only_when_it_says_the_image_is_absent(message, permanent):
    error = pull_error(EngineError(f"cannot pull image r/x:1: {message}"))
    assert isinstance(error, PermanentEngineError) is permanent, error
    assert str(error) == f"cannot pull image r/x:1: {message}"
