"""``Emulator``: the API server of a test's cluster, served over HTTPS on 127.0.0.1 (a
random port) by an aiohttp server in a thread of its own, with a CA of its own and a bearer
token, so that the official client verifies the server and authenticates as it does against
a cluster. ``write_kubeconfig`` gives the client its way in."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.kube.server import Api, Call
from tests.kube.status import ApiError
from tests.kube.store import DEFAULT_HISTORY, Store
from tests.pki import Pki

CLUSTER = "gobrave-emulator"
USER = "gobrave-test"


class Emulator:
    """Start with ``start()``, stop with ``stop()``; ``store`` is the state the fake
    kubelet and the test may read and change directly (it writes no ``calls``)."""

    def __init__(self, directory: Path, *, history_limit: int = DEFAULT_HISTORY) -> None:
        self.directory = directory
        self.store = Store(history_limit)
        self.token = secrets.token_urlsafe(24)
        self.api = Api(self.store, self.token)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- life ------------------------------------------------------------------------------

    def _tls(self) -> ssl.SSLContext:
        pki = Pki(self.directory)
        self.ca_path = pki.ca("emulator-ca")
        pki.signed("emulator-ca", "emulator", "subjectAltName=IP:127.0.0.1,DNS:localhost")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(pki.cert("emulator"), pki.key("emulator"))
        return context

    def start(self) -> Emulator:
        tls = self._tls()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve() -> None:
            self._runner = web.AppRunner(
                self.api.app(), shutdown_timeout=1, handle_signals=False, access_log=None
            )
            await self._runner.setup()
            await web.SockSite(self._runner, sock, ssl_context=tls).start()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(serve())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="kube-emulator", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the Kubernetes emulator did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is None or self._runner is None:
            return
        self.api.close_streams()
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()
        self._loop = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- what a test sets and reads ----------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every authenticated request so far (since the last ``reset``)."""
        return self.api.recorded()

    @property
    def busy_seconds(self) -> float:
        """Time spent answering requests so far (watch and follow streams left out), for a
        benchmark to tell the emulator's share from the client's."""
        return self.api.busy_seconds

    @property
    def cpu_seconds(self) -> float:
        """CPU time of the emulator's thread so far: everything the server does (TLS,
        HTTP parsing, the handlers, writing watch events to their streams), where
        ``busy_seconds`` counts only the handlers. On one interpreter the client waits
        for that thread to give the GIL back, so this is the emulator's share of a
        client's wall time, as a cluster's API server's would be on its own machine."""
        if self._thread is None or self._thread.ident is None:
            return 0.0
        return time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident))

    def drop_watches(self) -> None:
        """End every open watch now, as a restarting API server or a proxy's idle timeout
        does (the client sees its stream end, with no event)."""
        self.api.drop_watches()

    @contextlib.contextmanager
    def outage(self, code: int = 503) -> Iterator[None]:
        """While inside, every request answers ``code`` (ServiceUnavailable by default)
        and changes nothing; open watches are dropped when it begins."""
        self.api.refusing = code
        self.api.drop_watches()
        try:
            yield
        finally:
            self.api.refusing = None

    def serve_metrics(self, served: bool) -> None:
        """Serve ``metrics.k8s.io/v1beta1`` (discovery and PodMetrics, the default) or
        not, as a cluster without metrics-server: every path of the group answers 404."""
        self.api.serves_metrics = served

    def set_history_limit(self, limit: int) -> None:
        """Keep only the last ``limit`` changes: a watch from an older version gets 410."""
        self.store.set_history_limit(limit)

    def set_quota(self, namespace: str, hard: dict[str, Any], name: str = "quota") -> None:
        """A ``ResourceQuota`` with ``spec.hard`` = ``hard`` (``{"pods": "2"}``), replacing
        one of the same name."""
        body = {"metadata": {"name": name}, "spec": {"hard": {k: str(v) for k, v in hard.items()}}}
        with contextlib.suppress(ApiError):  # none yet
            self.store.remove("resourcequotas", namespace, name)
        self.store.create("resourcequotas", namespace, body)

    def create_namespace(self, name: str) -> None:
        self.store.create("namespaces", "", {"metadata": {"name": name}})

    def reset(self, keep_namespaces: set[str] | None = None) -> None:
        """Forget every object (but the namespaces kept, all by default), every change and
        every call; serve the metrics API again."""
        self.store.reset(keep_namespaces)
        self.api.forget_calls()
        self.api.serves_metrics = True

    def write_kubeconfig(self, path: Path, namespace: str) -> str:
        """A kubeconfig whose one context reaches this emulator (CA inline, token); returns
        the context's name."""
        ca = base64.b64encode(Path(self.ca_path).read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CLUSTER, "cluster": {"server": self.url,
                                                       "certificate-authority-data": ca}}],
            "users": [{"name": USER, "user": {"token": self.token}}],
            "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": USER,
                                                       "namespace": namespace}}],
            "current-context": CLUSTER,
        }  # fmt: skip
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return CLUSTER
