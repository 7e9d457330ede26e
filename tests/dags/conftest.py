"""Fixtures for DAG runs on the real Docker Engine (busybox nodes).

``dock`` and the engine fixtures come from tests/containers/conftest.py. ``dags`` builds
DAG templates whose nodes run shell commands in gobrave-test-busybox.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

import docker.errors
import pytest

from containers.models import ContainerInstance
from dags.models import DagEvent, DagNodeRun, DagRun, DagTemplate
from dags.services import dag_run_start, dag_template_save
from tests.api.conftest import alice, mallory, other_user, staff, staff_user  # noqa: F401
from tests.containers.conftest import Dock, dock, docker_client  # noqa: F401
from tests.processes import wait_for

# Node timings for the real-engine tests: fast polls, quick stops.
DAG_FAST = {"container_reconcile_interval": "2"}


@dataclass
class Dags:
    dock: Dock
    owner: object

    def template(self, nodes: list[dict], **kwargs) -> DagTemplate:
        shell = self.dock.template(["sh", "-c", "true"])
        for node in nodes:
            node.setdefault("template", shell.name)
        return dag_template_save(name=f"dag-{uuid.uuid4().hex[:8]}", nodes=nodes, **kwargs)

    def start(self, nodes: list[dict]) -> DagRun:
        return dag_run_start(dag=self.template(nodes), owner=self.owner, actor="test")

    def run(self, run: DagRun) -> DagRun:
        return DagRun.objects.get(pk=run.pk)

    def nodes(self, run: DagRun) -> dict[str, DagNodeRun]:
        return {n.key: n for n in DagNodeRun.objects.filter(run=run)}

    def instance(self, run: DagRun, key: str) -> ContainerInstance | None:
        """The instance of the node's attempt (None before it has one, or once it is gone)."""
        node = self.nodes(run)[key]
        return ContainerInstance.objects.filter(id=node.instance_id).first()

    def instances_reach(self, run: DagRun, status: str, *keys: str, timeout: float = 60) -> None:
        """Wait until the instances of the nodes ``keys`` are all in ``status``."""
        wait_for(
            lambda: all(getattr(self.instance(run, k), "status", "") == status for k in keys),
            timeout=timeout,
            message=f"{' and '.join(keys)} {status}",
            describe=lambda: self.describe(run),
        )

    def describe(self, run: DagRun) -> str:
        row = self.run(run)
        nodes = "; ".join(
            f"{n.key}={n.status} a{n.attempt} ({n.reason})" for n in self.nodes(run).values()
        )
        return f"run {row.status} ({row.reason}): {nodes}"

    def ends(self, run: DagRun, status: str, timeout: float = 180) -> DagRun:
        wait_for(
            lambda: self.run(run).status == status,
            timeout=timeout,
            message=f"run {status}",
            describe=lambda: self.describe(run),
        )
        return self.run(run)

    def settled(self, run: DagRun, timeout: float = 120) -> None:
        """Every instance of the run has reached a state the policies leave it in."""
        wait_for(
            lambda: (
                not ContainerInstance.objects.filter(
                    spec__labels__contains={"io.gobrave.dag-run": str(run.pk)},
                    status__in=[
                        "pending",
                        "creating",
                        "stop_pending",
                        "stopping",
                        "delete_pending",
                        "deleting",
                    ],
                ).exists()
            ),
            timeout=timeout,
            message="instances settled",
            describe=lambda: self.describe(run),
        )

    def containers(self, run: DagRun) -> dict[str, list[dict]]:
        """The engine's containers of the run by node key (any state)."""
        found: dict[str, list[dict]] = {}
        for c in self.dock.containers(label=f"io.gobrave.dag-run={run.pk}"):
            found.setdefault(c["Labels"]["io.gobrave.dag-node"], []).append(c)
        return found

    def volume_exists(self, run: DagRun) -> bool:
        try:
            self.dock.client.inspect_volume(f"gb-dag-{run.pk}")
        except docker.errors.NotFound:
            return False
        return True

    def events(self, run: DagRun, node: str = "") -> list[DagEvent]:
        return list(DagEvent.objects.filter(run_id=run.pk, node=node).order_by("id"))


@pytest.fixture
def dags(dock, owner):  # noqa: F811
    """A ``Dags`` helper; afterwards the test's containers and run volumes are removed."""
    yield Dags(dock, owner)
    for container in dock.containers():
        dock.client.remove_container(container["Id"], force=True)
    for run_id in DagRun.objects.values_list("pk", flat=True):
        with contextlib.suppress(docker.errors.APIError):
            dock.client.remove_volume(f"gb-dag-{run_id}", force=True)
