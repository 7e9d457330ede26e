"""Workspaces and mounts on the real Docker Engine, through the real processes (SPEC 8).

Nothing is made by hand: the workspace does not exist before the first create, gobrave's
worker makes it, and every assertion reads the engine or the host as it is afterwards.
"""

from __future__ import annotations

import contextlib
import os
import stat

import pytest

from containers.models import ContainerInstance, Workspace
from containers.requests.services import container_start, container_stop
from outbox.models import OutboxEvent
from tests.containers.test_docker_lifecycle import create, reaches
from tests.engine_events import created, creations
from tests.factories import UserFactory
from tests.processes import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# First instance of an owner writes a note; later ones print it. Either way it then idles.
SHARE = (
    "if [ -f /work/note ]; then echo seen: $(cat /work/note); "
    "else echo from-$OWNER_ID > /work/note && echo wrote; fi; "
    "echo uid=$(id -u) groups=$(id -G); sleep 600"
)


def logs(dock, instance: ContainerInstance) -> str:
    return dock.client.logs(f"gb-{instance.pk}").decode(errors="replace")


def said(dock, instance: ContainerInstance, text: str) -> str:
    wait_for(
        lambda: text in logs(dock, instance),
        timeout=30,
        message=f"{instance.name} prints {text!r}",
        describe=lambda: logs(dock, instance),
    )
    return logs(dock, instance)


@pytest.mark.parametrize("driver", ["volume", "directory"])
def test_an_owner_s_instances_share_the_workspace_and_another_owner_sees_nothing(
    dock, owner, gobrave_config, tmp_path, driver
):
    root = tmp_path / "workspaces"
    gobrave_config(container={"workspace_root": str(root)})
    dock.runtime.workspace_driver = driver
    dock.runtime.save(update_fields=["workspace_driver"])
    bob = UserFactory(username="bob")
    template = dock.template(SHARE, volumes=["$WORKSPACE_PATH:/work"])
    with creations(dock.client) as seen, dock.pipeline(container_workspace_root=str(root)):
        before = set(_volumes(dock))
        assert not root.exists()  # nothing made by hand
        first = create(template, owner)
        reaches(first, "running")
        # The workspace as placement resolved it for this engine (a stand-in until then).
        source = ContainerInstance.objects.get(pk=first.pk).spec["workspace"]["source"]
        assert source not in before
        said(dock, first, "wrote")
        second = reaches(create(template, owner), "running")
        assert f"seen: from-{owner.pk}" in said(dock, second, "seen:")
        other = reaches(create(template, bob), "running")
        assert "wrote" in said(dock, other, "uid=")  # bob's own, empty workspace

    uid = 1_000_000 + owner.pk
    assert f"uid={uid} groups={uid}" in logs(dock, first)
    rows = Workspace.objects.order_by("owner_id")
    assert [(w.owner_id, w.kind, w.uid) for w in rows] == [
        (owner.pk, driver, uid),
        (bob.pk, driver, 1_000_000 + bob.pk),
    ], list(rows.values())
    mounted = {
        m["Destination"]: m for m in dock.client.inspect_container(f"gb-{first.pk}")["Mounts"]
    }["/work"]
    other_mounted = {
        m["Destination"]: m for m in dock.client.inspect_container(f"gb-{other.pk}")["Mounts"]
    }["/work"]
    assert mounted["Source"] != other_mounted["Source"]
    if driver == "volume":
        assert mounted["Type"] == "volume" and mounted["Name"] == source
    else:
        assert mounted["Type"] == "bind" and mounted["Source"] == str(root / str(owner.pk))
        info = os.stat(root / str(owner.pk))
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (uid, uid, 0o2770)
    # The owner's second create found the workspace made: one helper ran, not two, and
    # it is gone once the ownership is set.
    helpers = created(seen, **{"io.gobrave.workspace": source})
    assert len(helpers) == 1, helpers
    assert (
        dock.client.containers(all=True, filters={"label": f"io.gobrave.workspace={source}"}) == []
    )


def _volumes(dock) -> set[str]:
    return {v["Name"] for v in dock.client.volumes().get("Volumes") or []}


def test_a_symlink_swapped_in_before_the_create_is_refused_and_nothing_is_mounted(
    dock, owner, gobrave_config, tmp_path
):
    allowed = tmp_path / "shared"
    (allowed / "data").mkdir(parents=True)
    gobrave_config(container={"allowed_volume_roots": [str(allowed)]})
    template = dock.template(["sleep", "600"], volumes=[f"{allowed}/data:/data:ro"])
    instance = create(template, owner)  # checked and accepted on this host
    (allowed / "data").rmdir()
    (allowed / "data").symlink_to("/")  # ... then swapped for the host's root
    with dock.pipeline(container_allowed_volume_roots=f"[{allowed}]"):
        row = reaches(instance, "failed")
    outbox = OutboxEvent.objects.get(aggregate_id=str(instance.pk))
    assert outbox.status == "dead", (outbox.status, outbox.attempts, outbox.last_error)
    assert f"{allowed}/data" in outbox.last_error and "is a symlink" in outbox.last_error
    assert "/data of template" in row.status_reason and str(allowed) not in row.status_reason, (
        row.status,
        row.status_reason,
    )
    assert dock.containers() == []  # no container, so nothing of the host was mounted


def test_a_symlink_swapped_in_before_a_start_is_refused(dock, owner, gobrave_config, tmp_path):
    allowed = tmp_path / "shared"
    (allowed / "data").mkdir(parents=True)
    gobrave_config(container={"allowed_volume_roots": [str(allowed)]})
    template = dock.template(["sleep", "600"], volumes=[f"{allowed}/data:/data"])
    with dock.pipeline(container_allowed_volume_roots=f"[{allowed}]"):
        instance = reaches(create(template, owner), "running")
        container_stop(instance_id=instance.pk, actor="test")
        reaches(instance, "stopped")
        (allowed / "data").rmdir()
        (allowed / "data").symlink_to("/")
        container_start(instance_id=instance.pk, actor="test")
        row = reaches(instance, "failed")
    assert "was refused" in row.status_reason and str(allowed) not in row.status_reason
    state = dock.engine_state(instance)
    assert state["Status"] == "exited", state  # never started again on the swapped path


def test_removing_a_volume_takes_a_left_behind_ownership_helper_with_it(dock):
    """A worker killed (or an engine restarted) between the helper's create and its
    removal leaves a helper that holds the volume; the chaos soak saw a DAG run's volume
    "in use" by one until its cleanup was dead-lettered. Removing the volume removes it."""
    from containers.engines import engine_for
    from containers.engines.docker import LABEL_WORKSPACE

    name = f"gb-test-helper-{dock.installation}"
    dock.client.create_volume(name)
    left = dock.client.create_container(
        "gobrave-test-busybox:latest",
        command=["true"],
        labels={LABEL_WORKSPACE: name},
        host_config=dock.client.create_host_config(binds={name: {"bind": "/w", "mode": "rw"}}),
    )
    try:
        engine_for(dock.runtime).remove_volume(name)
        names = [v["Name"] for v in dock.client.volumes().get("Volumes") or []]
        assert name not in names, names
        helpers = dock.client.containers(all=True, filters={"id": left["Id"]})
        assert helpers == [], helpers
    finally:
        for container in dock.client.containers(all=True, filters={"id": left["Id"]}):
            dock.client.remove_container(container["Id"], force=True)
        if name in [v["Name"] for v in dock.client.volumes().get("Volumes") or []]:
            dock.client.remove_volume(name, force=True)


def test_the_engine_measures_a_workspace_volume_and_removes_it_for_an_owner_with_none_left(
    dock, owner
):
    from containers.engines import engine_for
    from containers.execution.housekeeping import workspace_remove
    from containers.execution.workspaces import workspace_sizes_refresh
    from tests.containers.conftest import IMAGE

    name = f"gb-ws-{dock.installation}-measure-{owner.pk}"
    dock.client.create_volume(name)
    try:
        filler = dock.client.create_container(
            IMAGE,
            command=["dd", "if=/dev/zero", "of=/v/blob", "bs=1024", "count=1024"],
            host_config=dock.client.create_host_config(binds={name: {"bind": "/v"}}),
        )
        dock.client.start(filler)
        assert dock.client.wait(filler, timeout=30)["StatusCode"] == 0
        dock.client.remove_container(filler, force=True)
        row = Workspace.objects.create(
            runtime=dock.runtime, owner=owner, kind="volume", source=name, uid=1, gid=1
        )
        assert engine_for(dock.runtime).volume_sizes([name, f"{name}-none"]).keys() == {name}
        assert workspace_sizes_refresh(workspaces=[row]) == []
        row.refresh_from_db()
        assert row.size_bytes >= 1024 * 1024, row.size_bytes
        workspace_remove(workspace_id=row.pk, actor="test")
        assert name not in _volumes(dock)
        assert not Workspace.objects.filter(pk=row.pk).exists()
    finally:
        with contextlib.suppress(Exception):
            dock.client.remove_volume(name, force=True)
