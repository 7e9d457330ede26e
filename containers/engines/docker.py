"""The Docker engine: ``Engine`` over the ``docker`` SDK.

Pure library code (no Django). Every public method turns engine and transport errors
into ``EngineError`` (retriable: daemon unreachable, timeouts, 5xx, conflicts in
flight) or ``PermanentEngineError`` (4xx that no retry can fix, image missing under
``never``, a foreign container holding our name); no raw ``docker``/``requests``
exception escapes.

One SDK client (``docker.APIClient``) per process: it is created lazily and recreated
when the pid changes, so an engine object inherited across ``fork`` never reuses the
parent's sockets. A log follow has a client of its own (``follow_logs``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import io
import os
import re
import socket
import ssl
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker
import docker.constants
import docker.errors
import docker.tls
import requests.exceptions
import urllib3.exceptions
from docker.types import Mount as DockerMount

from containers.engines.base import (
    ContainerSpec,
    ContainerState,
    ContainerStats,
    EngineError,
    EngineEvent,
    PermanentEngineError,
    StaleTaskError,
    Workspace,
)
from containers.engines.docker_reasons import unreachable_reason
from containers.engines.follows import EngineStream, follow_in_thread
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE

__all__ = ["DockerEngine", "EVENT_ACTIONS", "PULL_POLICIES", "TLSFiles"]

PULL_POLICIES = frozenset({"never", "if_not_present", "always"})
EVENT_ACTIONS = frozenset(
    {"create", "start", "die", "oom", "pause", "unpause", "destroy", "stop", "kill"}
)
# Actor.Attributes of a container event mixes the container's labels with these keys.
_EVENT_ATTRIBUTES = frozenset({"name", "image", "exitCode", "signal", "execDuration"})
# 4xx statuses a retry can fix: timeout, conflict in flight (e.g. removal in progress),
# rate limit. Every other 4xx is permanent.
_RETRIABLE_4XX = frozenset({408, 409, 429})
# What a registry answers, through the engine, for an image that is not there or a
# reference that is not one: no retry can fix it, whatever the HTTP status (Docker 20.10
# answers 404 or 400 before a pull's stream starts; an error inside the stream has none).
# A registry that cannot be reached ("connection refused", "no such host", a timeout)
# matches none of these: retried.
_IMAGE_ABSENT = re.compile(
    r"manifest unknown|name unknown|repository does not exist|not found"
    r"|invalid reference format",
    re.IGNORECASE,
)
_NANO = 1_000_000_000
# Where the workspace-ownership helper container sees the workspace.
_WORKSPACE_MOUNT = "gobrave-workspace"
LABEL_WORKSPACE = "io.gobrave.workspace"
# What the engine answers (HTTP 500 on Docker 20.10 / containerd 1.6) when containerd
# still holds a task for a container the daemon does not run: a restart of the daemon
# cut a start of it short. Nothing of the user's runs in that task.
# What the engine answers a start of a container whose task an earlier start left behind
# (a daemon restart cut that start short), with the container's id: the task itself, or
# the task's state directory containerd kept ("failed to start shim: mkdir …/<id>: file
# exists"); either answers every later start of that container the same.
_STALE_TASK = (
    re.compile(r"^task ([0-9a-f]{64}): already exists$"),
    re.compile(r"^failed to start shim: mkdir \S*/([0-9a-f]{64}): file exists(?:: unknown)?$"),
)
# containerd's own words for the same (seen after a daemon restart cut a start short),
# naming no id: the task of the container being started.
_STALE_TASK_OF_REF = re.compile(r"^id already in use$")


def stale_task_of(explanation: str, ref: str = "") -> str | None:
    """The container id a start's refusal names as holding a stale task, else None;
    ``ref`` (the container being started) where the refusal names none."""
    explanation = explanation.strip()
    for pattern in _STALE_TASK:
        if found := pattern.match(explanation):
            return found.group(1)
    if ref and _STALE_TASK_OF_REF.match(explanation):
        return ref
    return None


_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
# Transport-level failures: the daemon is unreachable, slow, or the connection broke.
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    requests.exceptions.RequestException,
    urllib3.exceptions.HTTPError,
    OSError,
)
try:  # ssh:// (docker[ssh]): paramiko's refusals (host key, authentication) too
    import paramiko

    _TRANSPORT_ERRORS += (paramiko.SSHException,)
except ImportError:  # pragma: no cover - paramiko is a dependency
    pass


def _api_error(what: str, exc: docker.errors.APIError) -> EngineError:
    """Classify an engine HTTP error: 5xx and retriable 4xx → retry, other 4xx → permanent."""
    status = exc.status_code
    message = f"{what}: {exc.explanation or exc} (HTTP {status})"
    if status is not None and 400 <= status < 500 and status not in _RETRIABLE_4XX:
        return PermanentEngineError(message)
    return EngineError(message)


def pull_error(exc: EngineError) -> EngineError:
    """A pull's error, permanent when it says the image is absent (``_IMAGE_ABSENT``)."""
    if isinstance(exc, PermanentEngineError) or not _IMAGE_ABSENT.search(str(exc)):
        return exc
    return PermanentEngineError(str(exc))


class _ImageMissing(Exception):  # noqa: N818 - a signal inside create(), never raised out
    """The engine has no such image: apply the pull policy, then create again."""


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """Re-raise any docker/requests/socket error as EngineError or PermanentEngineError."""
    try:
        yield
    except EngineError:
        raise
    except docker.errors.APIError as exc:
        raise _api_error(what, exc) from exc
    except (docker.errors.InvalidArgument, docker.errors.InvalidRepository) as exc:
        raise PermanentEngineError(f"{what}: {exc}") from exc
    except (docker.errors.DockerException, *_TRANSPORT_ERRORS) as exc:
        raise EngineError(f"{what}: {exc}") from exc


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


def _to_event(raw: dict[str, Any]) -> EngineEvent | None:
    """One decoded /events message as a EngineEvent, or None when it is not one we follow."""
    action = raw.get("Action") or raw.get("status") or ""
    if raw.get("Type", "container") != "container" or action not in EVENT_ACTIONS:
        return None
    actor = raw.get("Actor") or {}
    attributes: dict[str, str] = actor.get("Attributes") or {}
    exit_code = attributes.get("exitCode")
    time_nano = raw.get("timeNano") or int(raw.get("time", 0)) * _NANO
    return EngineEvent(
        action=action,
        runtime_id=actor.get("ID") or raw.get("id", ""),
        name=attributes.get("name", ""),
        labels={k: v for k, v in attributes.items() if k not in _EVENT_ATTRIBUTES},
        time_nano=int(time_nano),
        exit_code=int(exit_code) if action == "die" and exit_code is not None else None,
    )


# TCP connections to an engine (calls and the events stream alike): keepalive probes
# after 10 s idle, every 5 s, 3 unanswered ones end the connection (a silently cut link
# is noticed within 25 s, where an idle events stream would otherwise wait forever),
# and data unacknowledged for 30 s fails the socket.
KEEPALIVE_OPTIONS: list[tuple[int, int, int]] = [
    (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
    *(
        [
            (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 10),
            (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5),
            (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3),
            (socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 30_000),
        ]
        if hasattr(socket, "TCP_USER_TIMEOUT")
        else []
    ),
]


def _keepalive(api: docker.APIClient) -> None:
    """Give every later TCP connection of ``api`` the keepalive options above.

    Set before the client's first call (the version negotiation: ``_new_client``); the
    pools are cleared all the same, so that no connection made before has been kept.
    Unix sockets have no such options and are left alone.
    """
    for prefix, adapter in api.adapters.items():
        manager = getattr(adapter, "poolmanager", None)
        if manager is None or not prefix.startswith(("http://", "https://")):
            continue
        manager.connection_pool_kw["socket_options"] = list(KEEPALIVE_OPTIONS)
        manager.clear()


def _negotiated(api: docker.APIClient) -> str:
    """The engine's API version, asked as the SDK's ``version="auto"`` asks it (refused
    below the SDK's minimum, as the SDK refuses it)."""
    version = api._retrieve_server_version()
    if docker.utils.version_lt(version, docker.constants.MINIMUM_DOCKER_API_VERSION):
        raise docker.errors.InvalidVersion(
            f"API versions below {docker.constants.MINIMUM_DOCKER_API_VERSION} are "
            "no longer supported by this library."
        )
    return version


class _APIClient(docker.APIClient):
    """The SDK's client, with ``trust_env`` fixed at construction: ``requests.Session``
    sets it True in its constructor, before the version negotiation's first request."""

    def __init__(self, *args: Any, trust_env: bool = True, **kwargs: Any) -> None:
        self._trust_env = trust_env
        super().__init__(*args, **kwargs)

    @property
    def trust_env(self) -> bool:  # type: ignore[override]
        return self._trust_env

    @trust_env.setter
    def trust_env(self, value: bool) -> None:
        """Ignored: set by ``requests.Session.__init__``."""


class _ClosableFrames:
    """The sync client's log stream as a ``streams.BlockingStream``: ``close()`` from any
    thread ends a read in progress. The SDK shuts the socket down; over ``ssh://`` with
    paramiko it refuses to, and the channel is closed instead."""

    def __init__(self, stream: Any, api: docker.APIClient) -> None:
        self.stream = stream
        self.api = api  # the follow's own client: closed with it

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.stream)

    def close(self) -> None:
        try:
            self.stream.close()
        except docker.errors.DockerException:
            fp = getattr(getattr(self.stream, "_response", None), "raw", None)
            channel = getattr(getattr(getattr(fp, "_fp", None), "fp", None), "channel", None)
            if channel is not None:
                channel.close()
        finally:
            self.api.close()


@dataclass(frozen=True)
class TLSFiles:
    """Mutual TLS to an engine over TCP (PEM files): the CA that signed the engine's
    certificate, and the client's certificate and key. Both clients verify the engine
    against ``ca_cert`` alone (not the system's CAs) and check its host name."""

    ca_cert: str
    client_cert: str
    client_key: str

    def for_docker_sdk(self) -> docker.tls.TLSConfig:
        return docker.tls.TLSConfig(
            client_cert=(self.client_cert, self.client_key), ca_cert=self.ca_cert, verify=True
        )

    @functools.cache  # noqa: B019 - frozen, a handful per process: read the files once
    def ssl_context(self) -> ssl.SSLContext:
        """For the async client (``docker_follow``); built once per set of files, not on
        the event loop at every follow."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_cert)
        context.load_cert_chain(self.client_cert, self.client_key)
        return context


# Transports the async follow reads natively (aiodocker); others go through a thread.
NATIVE_SCHEMES = ("unix://", "tcp://", "http://", "https://")


class DockerEngine:
    """``Engine`` for one Docker Engine at ``base_url``.

    ``stop_grace`` is the SIGTERM→SIGKILL grace the engine gives our containers when it
    stops them on its own (the container's StopTimeout), and ``stop()``'s default.
    ``timeout`` bounds every HTTP call except the events stream (which has no read
    timeout: it may be idle for hours); over TCP both carry keepalives
    (``KEEPALIVE_OPTIONS``), so a dead link ends the stream and fails a call. ``tls``:
    mutual TLS over TCP, for both the sync client and the log follow.

    ``native_follow`` is the driver's declared capability for its transport: True (unix
    socket, TCP) follows output with aiodocker (``docker_follow``); False (``ssh://``)
    runs the sync client's stream through ``follows.follow_in_thread``.
    """

    stop_removes = False  # a stopped container stays, with its exit code and files
    honours_node_constraints = False  # one host: a ``node.`` constraint cannot be met
    reports_cpu = True  # the cgroup's CPU counter, through the stats endpoint
    cpu_discovered = False  # every Docker Engine has it
    start_runs = True  # ``start`` returns once the container runs

    def __init__(
        self,
        base_url: str,
        stop_grace: int = 10,
        *,
        timeout: float = 30.0,
        tls: TLSFiles | None = None,
    ) -> None:
        self.base_url = base_url
        self.stop_grace = stop_grace
        self.timeout = timeout
        self.tls = tls
        self.native_follow = base_url.startswith(NATIVE_SCHEMES)
        self._client: docker.APIClient | None = None
        self._client_pid: int | None = None
        self._lock = threading.Lock()
        self._node_name: str | None = None

    def __repr__(self) -> str:
        return f"DockerEngine({self.base_url!r})"

    # -- plumbing ---------------------------------------------------------------------------

    def _docker(self) -> docker.APIClient:
        """This process's client; created on first use and after a fork (never shared)."""
        pid = os.getpid()
        if self._client is not None and self._client_pid == pid:
            return self._client
        if self._client_pid != pid:
            # A lock inherited across fork may be held by a thread that no longer exists.
            self._lock = threading.Lock()
        with self._lock:
            if self._client is None or self._client_pid != pid:
                # version="auto" negotiates with the daemon (may raise: callers translate).
                self._client = self._new_client("auto")
                self._client_pid = pid
            return self._client

    def _new_client(self, version: str) -> docker.APIClient:
        """A client of the SDK for this engine: TLS files, keepalives on TCP.

        A unix socket takes no proxy (requests would otherwise read the proxy variables
        and ~/.netrc again on every call); under TLS, ``REQUESTS_CA_BUNDLE`` or
        ``CURL_CA_BUNDLE`` would replace the CA given. So neither reads the environment,
        from the version negotiation on.

        ``version="auto"`` negotiates after the keepalives are set, on the connection the
        calls then reuse: one connection (over TLS, one handshake) for a new client, not
        one for the negotiation and another for every call after it.
        """
        api = _APIClient(
            base_url=self.base_url,
            version=docker.constants.DEFAULT_DOCKER_API_VERSION if version == "auto" else version,
            timeout=int(self.timeout),
            tls=self.tls.for_docker_sdk() if self.tls is not None else False,
            trust_env=not (self.base_url.startswith("unix://") or self.tls is not None),
        )
        _keepalive(api)
        if version == "auto":
            api._version = _negotiated(api)
        return api

    def _api(self) -> docker.APIClient:
        return self._docker()

    # -- engine -----------------------------------------------------------------------------

    def ping(self) -> bool:
        """True when the engine answers; never raises."""
        try:
            self.check()
        except EngineError:
            return False
        return True

    def check(self, *, timeout: float | None = None) -> None:
        """Ask the engine now (a ping, within ``timeout`` seconds if given); raise
        ``EngineError`` saying in an operator's words why it does not answer
        (``docker_reasons``: a refused handshake, a wrong CA, an expired certificate,
        plain HTTP to a TLS port, a closed port, a timeout, ssh refusals)."""
        tls = (self.tls.ca_cert, self.tls.client_cert, self.tls.client_key) if self.tls else None
        try:
            api = self._api()
            # The SDK's ping() takes no timeout; this is its own request with one.
            answer = (
                api.ping()
                if timeout is None
                else api._result(api._get(api._url("/_ping"), timeout=timeout)) == "OK"
            )
            if answer:
                return
            raise EngineError("the engine did not answer a ping")
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001 - every transport's errors (ssl, paramiko)
            raise EngineError(
                unreachable_reason(exc, base_url=self.base_url, tls_files=tls)
            ) from exc

    def node_name(self) -> str:
        """The engine host's name (``docker info`` Name), cached after the first answer."""
        if self._node_name is None:
            with _translated("info"):
                self._node_name = str(self._api().info().get("Name", ""))
        return self._node_name

    # -- images -----------------------------------------------------------------------------

    def image_present(self, image: str) -> bool:
        """True when ``image`` is in the engine's local store."""
        with _translated(f"inspect image {image}"):
            try:
                self._api().inspect_image(image)
            except docker.errors.NotFound:
                return False
            return True

    def ensure_image(self, image: str, pull_policy: str) -> None:
        """Make ``image`` available per policy.

        ``never``: missing is a PermanentEngineError. ``if_not_present``: pull only when
        missing. ``always``: pull; when the pull fails but a local copy exists, use it.
        Pull errors are classified like other engine errors (registry unreachable →
        EngineError; e.g. repository not found → PermanentEngineError).
        """
        if pull_policy not in PULL_POLICIES:
            raise PermanentEngineError(
                f"unknown pull_policy {pull_policy!r} for image {image!r} "
                f"(expected one of {', '.join(sorted(PULL_POLICIES))})"
            )
        if pull_policy == "never":
            if not self.image_present(image):
                raise PermanentEngineError(
                    f"image {image!r} is not present on the engine and pull_policy is 'never'"
                )
            return
        if pull_policy == "if_not_present" and self.image_present(image):
            return
        try:
            self._pull(image)
        except EngineError:
            if pull_policy == "always" and self.image_present(image):
                return
            raise

    def _pull(self, image: str) -> None:
        """Pull ``image`` (tag defaults to latest), surfacing errors reported mid-stream.

        The error says "cannot pull image <image>: <the engine's message>"; one that says
        the image is absent (``_IMAGE_ABSENT``) is a PermanentEngineError, whatever the
        status the engine sent it with.
        """
        what = f"cannot pull image {image}"
        repository, tag = docker.utils.parse_repository_tag(image)
        try:
            with _translated(what):
                for chunk in self._api().pull(
                    repository, tag=tag or "latest", stream=True, decode=True
                ):
                    if isinstance(chunk, dict) and chunk.get("error"):
                        raise EngineError(f"{what}: {chunk['error']}")
        except EngineError as exc:
            error = pull_error(exc)
            if error is exc:
                raise
            raise error from exc
        if not self.image_present(image):
            raise EngineError(f"{what}: the pull finished but the image is not present")

    # -- containers -------------------------------------------------------------------------

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

    def logs(self, ref: str, tail: int = 100) -> Iterator[bytes]:
        """See ``Engine.logs``: the engine's frames as they come (the json-file
        log driver's are at most 16 KiB); a timer closes the stream after ``timeout``."""
        return self._log_frames(ref, tail=tail, until=time.time() + self.timeout)

    async def follow_logs(self, ref: str, *, tail: int, until: float) -> EngineStream:
        """See ``Engine.follow_logs``. Natively (``native_follow``): aiodocker, a client and
        a connection per follow (``docker_follow.follow``). Otherwise the sync client's
        stream on a thread of its own (``follows.follow_in_thread``), opened within
        ``timeout`` like any call."""
        if self.native_follow:
            from containers.engines import docker_follow  # aiohttp only where streams are

            return await docker_follow.follow(
                self.base_url, ref=ref, tail=tail, until=until, timeout=self.timeout, tls=self.tls
            )
        return await follow_in_thread(lambda: self._blocking_follow(ref, tail), until=until)

    def _blocking_follow(self, ref: str, tail: int) -> _ClosableFrames | None:
        """A sync follow of ``ref`` on a client of its own (the shared client's API
        version, so no negotiation), closed with the stream: nothing of it stays in a
        pool. None: no such container; errors raise."""
        with _translated(f"logs {ref}"):
            api = self._new_client(self._api().api_version)
            try:
                stream = api.logs(
                    ref, stdout=True, stderr=True, stream=True, follow=True, tail=tail
                )
            except docker.errors.NotFound:
                api.close()
                return None
            except BaseException:
                api.close()
                raise
        return _ClosableFrames(stream, api)

    def _log_frames(self, ref: str, *, tail: int, until: float) -> Iterator[bytes]:
        """Open the output stream now (errors raise here); the frames as the caller reads,
        until the output ends, the stream drops or ``until`` passes. Closing the iterator
        closes the stream."""
        with _translated(f"logs {ref}"):
            try:
                stream = self._api().logs(
                    ref, stdout=True, stderr=True, stream=True, follow=False, tail=tail
                )
            except docker.errors.NotFound:
                stream = None

        def frames() -> Iterator[bytes]:
            if stream is None:
                return
            timer = threading.Timer(max(0.0, until - time.time()), stream.close)
            timer.daemon = True
            timer.start()
            try:
                yield from stream
            except (OSError, urllib3.exceptions.HTTPError, requests.exceptions.RequestException):
                return  # closed at the deadline, or the engine dropped the stream
            finally:
                timer.cancel()
                with contextlib.suppress(Exception):
                    stream.close()

        return frames()

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

    # -- events -----------------------------------------------------------------------------

    def event_cursor_now(self) -> str:
        """Now on this host's clock, in nanoseconds (the daemon's clock is the same
        machine's or close to it; a skew only replays or skips what the reconcile
        settles)."""
        return str(time.time_ns())

    def events(
        self,
        installation: str,
        since: str | int | None = None,
        *,
        until_nano: int | None = None,
    ) -> Iterator[EngineEvent]:
        """Follow lifecycle events of this installation's containers.

        ``since`` is a cursor (nanoseconds as a string, ``EngineEvent.cursor``). Docker's
        own ``since`` is inclusive and whole-second, so the stream is asked from the
        cursor's second and events before the cursor are dropped here; events at exactly
        the cursor come again (callers drop those they applied). Without ``since`` only
        new events arrive. ``until_nano`` (not in the protocol) ends the stream at that
        time instead of following. Raises EngineError when the daemon is unreachable;
        the iterator simply ends when the stream drops.
        """
        filters = {
            "type": "container",
            "label": f"{LABEL_INSTALLATION}={installation}",
            "event": sorted(EVENT_ACTIONS),
        }
        try:
            since_nano = None if since in (None, "") else int(since)  # type: ignore[arg-type]
        except ValueError:
            since_nano = None  # a cursor of another driver (the row changed driver): from now
        since_second = None if since_nano is None else since_nano // _NANO
        until = None if until_nano is None else f"{until_nano // _NANO}.{until_nano % _NANO:09d}"
        with _translated("events"):
            stream = self._api().events(
                since=since_second, until=until, filters=filters, decode=True
            )
        return self._follow(stream, since_nano or 0)

    @staticmethod
    def _follow(stream: Any, since_nano: int = 0) -> Iterator[EngineEvent]:
        try:
            while True:
                try:
                    raw = next(stream)
                except StopIteration:
                    return
                except docker.errors.APIError as exc:
                    raise _api_error("events", exc) from exc
                except (*_TRANSPORT_ERRORS, docker.errors.DockerException, ValueError):
                    return  # the stream dropped or was cut mid-message: the caller reconnects
                try:
                    event = _to_event(raw) if isinstance(raw, dict) else None
                except (ValueError, TypeError):
                    event = None  # one malformed message must not stop the stream for good
                if event is not None and event.time_nano >= since_nano:
                    yield event
        finally:
            with contextlib.suppress(Exception):
                stream.close()
