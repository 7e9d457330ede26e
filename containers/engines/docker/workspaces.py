"""The Docker engine's workspaces and networks: a volume or directory made and owned by
the workspace's uid:gid, removed, measured; a bridge network made."""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
import uuid

import docker
import docker.errors
from docker.types import Mount as DockerMount

from containers.engines.base import EngineError, Workspace
from containers.engines.docker.errors import _translated

# Where the workspace-ownership helper container sees the workspace.
_WORKSPACE_MOUNT = "gobrave-workspace"
LABEL_WORKSPACE = "io.gobrave.workspace"


def _ownership_tar(workspace: Workspace) -> bytes:
    """A tar with one directory entry, the helper's mount point, owned uid:gid, 2770."""
    entry = tarfile.TarInfo(_WORKSPACE_MOUNT)
    entry.type = tarfile.DIRTYPE
    entry.uid, entry.gid = workspace.uid, workspace.gid
    entry.mode = 0o2770
    entry.mtime = int(time.time())
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        archive.addfile(entry)
    return buffer.getvalue()


class _Workspaces:
    """``DockerEngine``'s workspace and network calls (a part of it: uses its ``_api``)."""

    def ensure_workspace(self, workspace: Workspace, *, image: str) -> None:
        """Create the volume (or let the engine create the directory) and set its owner.

        1. ``volume``: create the named volume (a no-op when it exists).
        2. Create, never start, a helper container from ``image`` that mounts the
           workspace (a ``directory`` is bound the legacy way, so the engine makes it
           when missing, on its own host).
        3. Upload a tar holding only the mount point's directory entry, ``uid:gid``
           mode 2770: the engine applies it to the workspace's root. Nothing inside is
           touched. 4. Remove the helper.
        """
        with _translated(f"workspace {workspace.source}"):
            api = self._api()
            labels = {**workspace.labels, LABEL_WORKSPACE: workspace.source}
            if workspace.kind == "volume":
                api.create_volume(workspace.source, labels=labels)
                host_config = api.create_host_config(
                    mounts=[DockerMount(f"/{_WORKSPACE_MOUNT}", workspace.source, type="volume")]
                )
            else:
                host_config = api.create_host_config(
                    binds={workspace.source: {"bind": f"/{_WORKSPACE_MOUNT}", "mode": "rw"}}
                )
            # Not labelled as the installation's: the reconciler must not take the
            # short-lived helper for an orphan.
            helper = api.create_container(
                image,
                command=["true"],
                name=f"gb-workspace-{uuid.uuid4().hex[:12]}",
                labels={LABEL_WORKSPACE: workspace.source},
                host_config=host_config,
                network_disabled=True,
            )
            try:
                if not api.put_archive(helper["Id"], "/", _ownership_tar(workspace)):
                    raise EngineError(f"workspace {workspace.source}: ownership not applied")
            finally:
                with contextlib.suppress(docker.errors.NotFound):
                    api.remove_container(helper["Id"], force=True)

    def ensure_network(self, name: str, *, labels: dict[str, str]) -> None:
        """Create the bridge network ``name`` unless it exists. Idempotent under races: a
        duplicate name is refused by the engine (409) and taken as done."""
        with _translated(f"network {name}"):
            api = self._api()
            # The engine's name filter matches substrings: compare the names exactly.
            if any(found.get("Name") == name for found in api.networks(names=[name])):
                return
            try:
                api.create_network(name, driver="bridge", labels=labels, check_duplicate=True)
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise

    def remove_volume(self, name: str) -> None:
        """Remove the named volume. Idempotent: a missing volume is fine.

        Ownership helpers of this volume (``ensure_workspace``; never started) are
        removed first: one left behind by a worker killed, or an engine restarted,
        between the helper's create and its removal would hold the volume "in use"
        forever. A helper of a workspace being made right now loses its volume and that
        create is retried.
        """
        with _translated(f"remove volume {name}"):
            api = self._api()
            helpers = api.containers(all=True, filters={"label": f"{LABEL_WORKSPACE}={name}"})
            for helper in helpers:
                with contextlib.suppress(docker.errors.NotFound):
                    api.remove_container(helper["Id"], force=True)
            try:
                api.remove_volume(name, force=True)
            except docker.errors.NotFound:
                return

    def volume_sizes(self, names: list[str]) -> dict[str, int]:
        """From ``docker system df``: ``UsageData.Size`` of each named volume, where the
        volume driver measures it (the local driver does; -1 means it did not)."""
        wanted = set(names)
        with _translated("measure volumes"):
            volumes = self._api().df().get("Volumes") or []
        sizes = {}
        for volume in volumes:
            size = (volume.get("UsageData") or {}).get("Size", -1)
            if volume.get("Name") in wanted and isinstance(size, int) and size >= 0:
                sizes[volume["Name"]] = size
        return sizes
