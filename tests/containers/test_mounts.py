"""Mount rules (SPEC 8): when a template is saved, when a request is resolved, and the
worker's check on its own host right before the engine mounts anything."""

from __future__ import annotations

import socket

import pytest
from django.core.exceptions import ValidationError

from containers.errors import InvalidSpec, MountRefused
from containers.models import Runtime
from containers.spec.mounts import check_bind_source
from containers.spec.resolve import clean_template_fields, resolve_spec
from tests.factories import spec_template

VARS = {"OWNER_ID": "7", "INSTANCE_ID": "abc", "CONTAINER_NAME": "gb-abc", "INSTANCE_NAME": "x"}
WORKSPACE = {"kind": "volume", "source": "gb-ws-i-7", "uid": 1007, "gid": 1007}


def resolve(volumes, *, roots=("/",), local=True, workspace_root="/srv/ws"):
    return resolve_spec(
        template=spec_template(image="busybox", volumes=volumes),
        variables=VARS,
        env_overrides=None,
        roots=list(roots),
        installation="i",
        owner_id=7,
        workspace=WORKSPACE,
        local=local,
        workspace_root=workspace_root,
    )


NEVER = [
    "/",
    "/proc",
    "/proc/1/root",
    "/sys/fs/cgroup",
    "/dev",
    "/dev/sda",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/srv/docker.sock",
    "/srv/x/../../proc",
]


@pytest.mark.parametrize("source", NEVER)
def test_host_internals_are_refused_when_the_template_is_saved(source):
    with pytest.raises(InvalidSpec, match=r"volumes\[0\]\.source"):
        clean_template_fields(volumes=[{"source": source, "target": "/x"}])


@pytest.mark.parametrize("source", NEVER)
def test_host_internals_are_refused_at_request_even_if_allowed_volume_roots_is_slash(source):
    with pytest.raises(InvalidSpec):
        resolve([{"source": source, "target": "/x"}], roots=["/"])


@pytest.mark.parametrize(
    "source", ["$WORKSPACE_PATH/cache", "${WORKSPACE_PATH}/a/b", "$WORKSPACE_ROOT/7"]
)
def test_a_path_below_the_workspace_is_refused_when_saved(source):
    with pytest.raises(InvalidSpec, match="exactly \\$WORKSPACE_PATH, never a path below"):
        clean_template_fields(volumes=[f"{source}:/data"])


@pytest.mark.parametrize(
    "source", ["/srv/shared/$INSTANCE_NAME", "/srv/${USERNAME}", "/srv/$USERNAME/x"]
)
def test_user_chosen_variables_in_a_volume_source_are_refused_when_saved(source):
    with pytest.raises(InvalidSpec, match="chosen by the user"):
        clean_template_fields(volumes=[f"{source}:/data"])


def test_a_user_chosen_variable_may_appear_in_env_and_command():
    assert clean_template_fields(env={"N": "$INSTANCE_NAME"}, command=["echo", "$USERNAME"])


def test_the_workspace_root_is_refused_even_inside_the_allowed_roots():
    with pytest.raises(MountRefused) as refused:
        resolve(["/srv/ws/8:/data"], roots=["/srv"])
    assert "only as $WORKSPACE_PATH" in refused.value.operator_message


def test_a_remote_engine_gets_volumes_only():
    spec = resolve(["$WORKSPACE_PATH:/work"], local=False)
    assert spec["mounts"][0]["type"] == "volume"
    with pytest.raises(MountRefused) as refused:
        resolve(["$WORKSPACE_PATH:/work", "/srv/shared:/s"], roots=["/srv"], local=False)
    assert "remote engines get volumes only" in refused.value.operator_message
    assert refused.value.message == "volumes[1] (target /s) of template t was refused"
    assert refused.value.details == {"field": "volumes[1]", "target": "/s", "path": "/srv/shared"}


def test_a_remote_runtime_cannot_use_directory_workspaces():
    runtime = Runtime(name="far", base_url="tcp://10.0.0.9:2376", workspace_driver="directory")
    with pytest.raises(ValidationError, match="named-volume"):
        runtime.clean()
    Runtime(name="near", workspace_driver="directory").clean()  # the local socket


# -- the worker's check, on its own host -------------------------------------------------------


def test_a_plain_directory_inside_the_roots_passes(tmp_path):
    (tmp_path / "data").mkdir()
    assert (
        check_bind_source(str(tmp_path / "data"), roots=[str(tmp_path)], workspace_root="/w")
        is None
    )


def test_a_symlink_anywhere_on_the_path_is_refused(tmp_path):
    (tmp_path / "real" / "data").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "root").symlink_to("/")
    for path in (tmp_path / "link" / "data", tmp_path / "real" / "root"):
        reason = check_bind_source(str(path), roots=[str(tmp_path)], workspace_root="/w")
        assert reason is not None and "is a symlink" in reason, (path, reason)


def test_a_socket_or_a_missing_path_is_refused(tmp_path):
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "api"))
    try:
        reason = check_bind_source(
            str(tmp_path / "api"), roots=[str(tmp_path)], workspace_root="/w"
        )
    finally:
        listener.close()
    assert reason is not None and "socket" in reason
    missing = check_bind_source(str(tmp_path / "gone"), roots=[str(tmp_path)], workspace_root="/w")
    assert missing is not None and "does not exist" in missing


def test_a_source_no_longer_inside_the_roots_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    reason = check_bind_source(str(tmp_path / "data"), roots=["/elsewhere"], workspace_root="/w")
    assert reason == "outside the allowed volume roots"
