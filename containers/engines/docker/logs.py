"""The Docker engine's output: a bounded tail (``logs``) and a follow (``follow_logs``:
natively with aiodocker, ``follow``, or the sync client's stream on a thread)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import requests.exceptions
import urllib3.exceptions

from containers.engines.docker.errors import _translated
from containers.engines.follows import EngineStream, follow_in_thread


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


class _Logs:
    """``DockerEngine``'s output calls (a part of it: uses its ``_api``, ``_new_client``,
    ``native_follow``, ``base_url``, ``timeout`` and ``tls``)."""

    def logs(self, ref: str, tail: int = 100) -> Iterator[bytes]:
        """See ``Engine.logs``: the engine's frames as they come (the json-file
        log driver's are at most 16 KiB); a timer closes the stream after ``timeout``."""
        return self._log_frames(ref, tail=tail, until=time.time() + self.timeout)

    async def follow_logs(self, ref: str, *, tail: int, until: float) -> EngineStream:
        """See ``Engine.follow_logs``. Natively (``native_follow``): aiodocker, a client and
        a connection per follow (``follow.follow``). Otherwise the sync client's
        stream on a thread of its own (``follows.follow_in_thread``), opened within
        ``timeout`` like any call."""
        if self.native_follow:
            # aiohttp only where streams are
            from containers.engines.docker import follow as docker_follow

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
