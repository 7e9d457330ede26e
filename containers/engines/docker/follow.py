"""The Docker engine's asynchronous side: ``DockerEngine.follow_logs`` over ``aiodocker``.

Each follow has a client and a connection of its own, closed when the follow ends, is
closed, or its task is cancelled: nothing is pooled between follows, so a follower that
went away leaves no engine connection open. Unix sockets and TCP (plain, or mutual TLS
with ``TLSFiles``, verified as the sync client verifies) are read natively. ``ssh://`` is
not (aiodocker would need ``asyncssh`` and the docker CLI on the engine's host):
``DockerEngine`` reads it through ``follows.follow_in_thread`` instead.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncGenerator
from typing import Any

import aiodocker
import aiohttp

from containers.engines.base import EngineError, PermanentEngineError
from containers.engines.docker.client import KEEPALIVE_OPTIONS, TLSFiles
from containers.engines.docker.errors import _RETRIABLE_4XX
from containers.engines.follows import EngineStream

__all__ = ["follow"]

_HEADER = 8  # a multiplexed frame: stream type, 3 zero bytes, payload length (big-endian)


def _keepalive_socket(address: Any) -> socket.socket:
    """A TCP socket with the sync client's keepalive options (a cut link ends a follow)."""
    family, kind, proto, _, _ = address
    sock = socket.socket(family=family, type=kind, proto=proto)
    for level, option, value in KEEPALIVE_OPTIONS:
        sock.setsockopt(level, option, value)
    return sock


def _connector(base_url: str, tls: TLSFiles | None) -> tuple[aiohttp.BaseConnector, str]:
    """A connector of this follow's own and the URL to send its requests to."""
    if base_url.startswith("unix://"):
        return aiohttp.UnixConnector(path=base_url.removeprefix("unix://")), "http://docker"
    address = base_url.split("://", 1)[1]
    secure = tls is not None or base_url.startswith("https://")
    context = tls.ssl_context() if tls is not None else None
    connector = aiohttp.TCPConnector(
        ssl=context if context is not None else secure, socket_factory=_keepalive_socket
    )
    return connector, f"{'https' if secure else 'http'}://{address}"


def _engine_error(what: str, exc: BaseException) -> EngineError:
    """aiodocker's and aiohttp's errors as ours: 5xx, unreachable (aiodocker's 900) and
    retriable 4xx → ``EngineError``; any other 4xx → ``PermanentEngineError``."""
    if isinstance(exc, aiodocker.DockerError):
        message = f"{what}: {exc.message} (HTTP {exc.status})"
        if 400 <= exc.status < 500 and exc.status not in _RETRIABLE_4XX:
            return PermanentEngineError(message)
        return EngineError(message)
    if isinstance(exc, TimeoutError):
        return EngineError(f"{what}: the engine did not answer in time")
    return EngineError(f"{what}: {type(exc).__name__}: {exc}")


async def follow(
    base_url: str,
    *,
    ref: str,
    tail: int,
    until: float,
    timeout: float,
    tls: TLSFiles | None = None,
) -> EngineStream:
    """Open the output of container ``ref`` (``Engine.follow_logs``).

    1. A new client and connector (unix socket, or TCP with keepalives and TLS).
    2. Within ``timeout``: inspect the container (404: an empty stream, nothing held), then
       open ``/logs?follow=1`` (any failure: everything closed, ``EngineError`` raised).
    3. The stream reads frames until the output ends, the connection drops or ``until``
       passes; its end, ``aclose()`` or a cancellation closes the response, the client and
       the connector.
    """
    what = f"logs {ref}"
    connector, url = _connector(base_url, tls)
    client = aiodocker.Docker(url=url, connector=connector)
    response: aiohttp.ClientResponse | None = None

    async def release() -> None:
        if response is not None:
            response.close()  # the connection is closed, never returned to a pool
        try:
            await client.close()
        finally:
            await connector.close()

    try:
        async with asyncio.timeout(timeout):
            try:
                info = await client.containers.container(ref).show()
            except aiodocker.DockerError as exc:
                if exc.status != 404:
                    raise
                await release()
                return EngineStream.empty()
            params = {"stdout": True, "stderr": True, "follow": True, "tail": tail}
            try:
                response = await client._do_query(  # noqa: SLF001 - the raw frames, as bytes
                    f"containers/{info['Id']}/logs",
                    method="GET",
                    params=params,
                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
                )
            except aiodocker.DockerError as exc:
                if exc.status != 404:  # removed meanwhile: nothing to follow
                    raise
                await release()
                return EngineStream.empty()
    except BaseException as exc:
        await release()
        if isinstance(exc, aiodocker.DockerError | aiohttp.ClientError | OSError | TimeoutError):
            raise _engine_error(what, exc) from exc
        raise
    tty = bool((info.get("Config") or {}).get("Tty"))
    return EngineStream(_frames(response, tty=tty, until=until), release)


async def _frames(
    response: aiohttp.ClientResponse, *, tty: bool, until: float
) -> AsyncGenerator[bytes, None]:
    """The payloads of the response's frames (a TTY's output comes unframed).

    One timer for the whole stream closes the response at ``until`` (which ends a read in
    progress), not a timeout per chunk: a chunk costs no timer (bench/streams.py)."""
    loop = asyncio.get_running_loop()
    left = until - time.time()
    if left <= 0:
        return
    ended = False

    def end() -> None:
        nonlocal ended
        ended = True
        response.close()

    timer = loop.call_later(left, end)
    content = response.content
    try:
        while not ended:
            try:
                chunk = await _next_chunk(content, tty=tty)
            except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError):
                return  # until passed, the output ended, or the engine dropped the stream
            if not chunk:
                return
            yield chunk
    finally:
        timer.cancel()


async def _next_chunk(content: aiohttp.StreamReader, *, tty: bool) -> bytes:
    if tty:
        return await content.readany()
    while True:
        header = await content.readexactly(_HEADER)
        length = int.from_bytes(header[4:], "big")
        if length:
            return await content.readexactly(length)
