"""The SDK client of a Docker engine: TCP keepalives, the API version negotiated, the
environment not read (``_APIClient``), and mutual TLS (``TLSFiles``)."""

from __future__ import annotations

import functools
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import docker
import docker.constants
import docker.errors
import docker.tls

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
        """For the async client (``follow``); built once per set of files, not on
        the event loop at every follow."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_cert)
        context.load_cert_chain(self.client_cert, self.client_key)
        return context


# Transports the async follow reads natively (aiodocker); others go through a thread.
NATIVE_SCHEMES = ("unix://", "tcp://", "http://", "https://")
