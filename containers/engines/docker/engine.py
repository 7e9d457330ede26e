"""``DockerEngine``: its capabilities, its client (one per process), its health; the
calls themselves are in the parts it is made of (``images``, ``containers``,
``workspaces``, ``logs``, ``events``)."""

from __future__ import annotations

import os
import threading

import docker
import docker.constants

from containers.engines.base import EngineError
from containers.engines.docker.client import (
    NATIVE_SCHEMES,
    TLSFiles,
    _APIClient,
    _keepalive,
    _negotiated,
)
from containers.engines.docker.containers import _Containers
from containers.engines.docker.errors import _translated
from containers.engines.docker.events import _Events
from containers.engines.docker.images import _Images
from containers.engines.docker.logs import _Logs
from containers.engines.docker.reasons import unreachable_reason
from containers.engines.docker.workspaces import _Workspaces


class DockerEngine(_Images, _Containers, _Workspaces, _Logs, _Events):
    """``Engine`` for one Docker Engine at ``base_url``.

    ``stop_grace`` is the SIGTERM→SIGKILL grace the engine gives our containers when it
    stops them on its own (the container's StopTimeout), and ``stop()``'s default.
    ``timeout`` bounds every HTTP call except the events stream (which has no read
    timeout: it may be idle for hours); over TCP both carry keepalives
    (``KEEPALIVE_OPTIONS``), so a dead link ends the stream and fails a call. ``tls``:
    mutual TLS over TCP, for both the sync client and the log follow.

    ``native_follow`` is the driver's declared capability for its transport: True (unix
    socket, TCP) follows output with aiodocker (``follow``); False (``ssh://``)
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
        (``reasons``: a refused handshake, a wrong CA, an expired certificate,
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
