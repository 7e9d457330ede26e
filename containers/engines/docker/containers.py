"""The Docker engine's containers: create (or adopt), start, stop, remove, inspect,
statistics, and the installation's list."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time

import docker
import docker.errors
from docker.types import Mount as DockerMount

from containers.engines.base import (
    ContainerSpec,
    ContainerState,
    ContainerStats,
    EngineError,
    PermanentEngineError,
    StaleTaskError,
)
from containers.engines.docker.errors import _translated, stale_task_of
from containers.engines.docker.events import _NANO
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE

_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


class _ImageMissing(Exception):  # noqa: N818 - a signal inside create(), never raised out
    """The engine has no such image: apply the pull policy, then create again."""


def _parse_time(value: str | None) -> dt.datetime | None:
    """Docker's RFC 3339 nanosecond timestamps as aware datetimes; the zero time is None."""
    if not value or value.startswith("0001-01-01"):
        return None
    match = _TIMESTAMP.match(value)
    if match is None:
        return None
    base, fraction, zone = match.groups()
    micros = (fraction or "")[:6].ljust(6, "0")
    return dt.datetime.fromisoformat(f"{base}.{micros}{'+00:00' if zone == 'Z' else zone}")


class _Containers:
    """``DockerEngine``'s container calls (a part of it: uses its ``_api``,
    ``ensure_image``, ``node_name`` and ``stop_grace``)."""

    def create(self, spec: ContainerSpec) -> str:
        """Create the container ``spec.name`` (not started) and return its id.

        Idempotent: when the name is taken by a container whose instance label equals
        ``spec.labels[LABEL_INSTANCE]``, that container is adopted. A name held by any
        other container is a PermanentEngineError. Memory swap is capped at the memory
        limit so exceeding it OOM-kills instead of swapping; no restart policy.
        """
        if spec.pull_policy == "always":
            self.ensure_image(spec.image, spec.pull_policy)
        try:
            return self._create(spec)
        except _ImageMissing:
            # The common case costs no image inspection; a missing image is handled by
            # the pull policy here (never: permanent; if_not_present: pull) and retried.
            self.ensure_image(spec.image, spec.pull_policy)
            return self._create(spec)

    def _create(self, spec: ContainerSpec) -> str:
        with _translated(f"create {spec.name}"):
            api = self._api()
            host_config = api.create_host_config(
                mounts=[
                    DockerMount(
                        m.target,
                        m.source,
                        type=m.type,
                        read_only=m.read_only,
                        no_copy=m.type == "volume" and m.workspace,
                    )
                    for m in spec.mounts
                ],
                group_add=list(spec.group_add) or None,
                nano_cpus=round(spec.cpu * _NANO) if spec.cpu else None,
                mem_limit=spec.memory,
                memswap_limit=spec.memory,
                restart_policy={"Name": "no"},
                # Never privileged, never the host's namespaces (stated, not left to defaults).
                privileged=False,
                ipc_mode="private",
                network_mode=spec.network,
                cap_drop=["ALL"],
                cap_add=list(spec.cap_add) or None,
                security_opt=["no-new-privileges:true"] if spec.no_new_privileges else None,
                pids_limit=spec.pids_limit,
                read_only=spec.read_only_rootfs,
                tmpfs=(
                    {"/tmp": f"rw,nosuid,nodev,size={spec.tmpfs_size}"}
                    if spec.read_only_rootfs and spec.tmpfs_size
                    else None
                ),
                runtime=spec.oci_runtime,
            )
            try:
                created = api.create_container(
                    spec.image,
                    command=spec.command,
                    name=spec.name,
                    labels=dict(spec.labels),
                    environment=dict(spec.env),
                    host_config=host_config,
                    user=spec.user,
                    stop_timeout=self.stop_grace,
                    detach=True,
                )
            except docker.errors.ImageNotFound as exc:
                raise _ImageMissing(str(exc)) from exc
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
                return self._adopt(spec)
            return str(created["Id"])

    def _adopt(self, spec: ContainerSpec) -> str:
        """Resolve a name conflict: return the existing container's id when it is ours."""
        existing = self.inspect(spec.name)
        if existing is None:
            raise EngineError(f"create {spec.name}: name conflict, but the holder vanished")
        wanted = spec.labels.get(LABEL_INSTANCE)
        if wanted is None or existing.labels.get(LABEL_INSTANCE) != wanted:
            raise PermanentEngineError(
                f"create {spec.name}: the name is held by container {existing.runtime_id[:12]} "
                f"with {LABEL_INSTANCE}={existing.labels.get(LABEL_INSTANCE)!r}, "
                f"not {wanted!r}"
            )
        if existing.status == "removing":
            raise EngineError(f"create {spec.name}: the existing container is being removed")
        return existing.runtime_id

    def start(self, ref: str, spec: ContainerSpec | None = None) -> None:
        """Start the container, or unpause it when paused. Nothing when already running.
        ``spec`` is not needed: a stopped container is still there.

        A missing container is a PermanentEngineError (HTTP 404), as is a command that
        cannot be executed (HTTP 400). When the engine answers that a task for this very
        container already exists (``stale_task_of``), the container is inspected: if the
        engine runs it, the start is done; otherwise it is a ``StaleTaskError``.
        """
        with _translated(f"start {ref}"):
            api = self._api()
            try:
                api.start(ref)  # a running container answers 304: nothing to do
                return
            except docker.errors.APIError as exc:
                stale = stale_task_of(str(exc.explanation or ""), ref)
                if stale is None and exc.status_code == 409 and "paused" in str(exc.explanation):
                    api.unpause(ref)
                    return
                if stale is None:
                    raise
                message = f"start {ref}: {exc.explanation} (HTTP {exc.status_code})"
        state = self.inspect(ref)
        if state is None or stale not in (state.runtime_id, ref):
            raise EngineError(message)  # not this container's task: an ordinary error
        if state.status == "running":
            return
        raise StaleTaskError(message)

    def stop(self, ref: str, timeout: int | None = None) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` s (default ``stop_grace``).

        Idempotent: stopping a stopped or missing container is fine. Paused containers
        are stopped too.
        """
        grace = self.stop_grace if timeout is None else timeout
        with _translated(f"stop {ref}"), contextlib.suppress(docker.errors.NotFound):
            self._api().stop(ref, timeout=grace)

    def remove(self, ref: str) -> None:
        """Force-remove the container and its anonymous volumes. Idempotent."""
        with _translated(f"remove {ref}"):
            try:
                self._api().remove_container(ref, force=True, v=True)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if exc.status_code == 409 and "already in progress" in str(exc.explanation):
                    return
                raise

    def inspect(self, ref: str) -> ContainerState | None:
        """The container's state, or None when it does not exist.

        ``exit_code`` is set only once the container has exited (or is dead).
        """
        with _translated(f"inspect {ref}"):
            try:
                data = self._api().inspect_container(ref)
            except docker.errors.NotFound:
                return None
        state = data.get("State") or {}
        status = str(state.get("Status", ""))
        return ContainerState(
            runtime_id=data["Id"],
            name=str(data.get("Name", "")).lstrip("/"),
            status=status,
            labels=dict((data.get("Config") or {}).get("Labels") or {}),
            exit_code=state.get("ExitCode") if status in ("exited", "dead") else None,
            oom_killed=bool(state.get("OOMKilled")),
            error=str(state.get("Error") or ""),
            node_name=self.node_name(),
            started_at=_parse_time(state.get("StartedAt")),
            finished_at=_parse_time(state.get("FinishedAt")),
        )

    def stats(self, ref: str) -> ContainerStats | None:
        """The engine's own statistics, one call: ``stream=False, one_shot=True`` (no wait
        for a second sample; the caller takes the difference of two looks). The cgroup's
        cumulative CPU time; None for a missing container or one not running (the engine
        then answers with an empty sample, read at the zero time)."""
        with _translated(f"stats {ref}"):
            try:
                data = self._api().stats(ref, stream=False, one_shot=True)
            except docker.errors.NotFound:
                return None
        read_at = time.time()
        usage = ((data or {}).get("cpu_stats") or {}).get("cpu_usage") or {}
        total = usage.get("total_usage")
        if not total or str(data.get("read", "")).startswith("0001-"):
            return None
        memory = (data.get("memory_stats") or {}).get("usage")
        return ContainerStats(
            read_at=read_at,
            cpu_total_ns=int(total),
            memory_bytes=int(memory) if memory is not None else None,
        )

    def stats_served(self, *, timeout: float | None = None) -> bool:
        """True once the engine answers: the stats endpoint is part of every Engine API."""
        self.check(timeout=timeout)
        return True

    def list_ours(
        self, installation: str, labels: dict[str, str] | None = None
    ) -> list[ContainerState]:
        """Every container, in any state, labelled ``io.gobrave.installation=installation``
        and each of ``labels`` (the engine filters). One call: id, name, status and
        labels from the engine's list, nothing inspected (``Engine.list_ours``)."""
        wanted = [f"{LABEL_INSTALLATION}={installation}"]
        wanted += [f"{key}={value}" for key, value in (labels or {}).items()]
        with _translated(f"list {installation}"):
            found = self._api().containers(all=True, filters={"label": wanted})
        return [
            ContainerState(
                runtime_id=summary["Id"],
                name=str((summary.get("Names") or [""])[0]).lstrip("/"),
                status=str(summary.get("State", "")),
                labels=dict(summary.get("Labels") or {}),
            )
            for summary in found
        ]
