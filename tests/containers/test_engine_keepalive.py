"""Every TCP connection to a Docker Engine carries keepalives (issue 16 item 4).

A local HTTP server stands in for an engine reached over TCP (it answers the SDK's
version negotiation and ``/_ping``); the test reads the options of the client's socket.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from containers.engines.docker import KEEPALIVE_OPTIONS, DockerEngine


class _Engine(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's name
        body = (
            b"OK" if self.path.endswith("/_ping") else json.dumps({"ApiVersion": "1.43"}).encode()
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.fixture
def tcp_engine():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _pooled_sockets(engine: DockerEngine) -> list[socket.socket]:
    found = []
    for adapter in engine._api().adapters.values():
        manager = getattr(adapter, "poolmanager", None)
        for pool in list(manager.pools._container.values()) if manager else []:
            found += [conn.sock for conn in list(pool.pool.queue) if conn and conn.sock]
    return found


def test_a_tcp_engines_connections_carry_keepalives(tcp_engine):
    engine = DockerEngine(tcp_engine)
    assert engine.ping()
    [sock] = _pooled_sockets(engine)
    for level, option, value in KEEPALIVE_OPTIONS:
        assert sock.getsockopt(level, option) == value, (level, option)
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
