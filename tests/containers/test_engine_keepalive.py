"""Every TCP connection to a Docker Engine carries keepalives (issue 16 item 4), and a
new client makes one connection, not one for its version negotiation and one more.

A local HTTP server stands in for an engine reached over TCP (it answers the SDK's
version negotiation and ``/_ping``, and counts the connections it accepts); the test
reads the options of the client's socket.
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


class _CountingServer(ThreadingHTTPServer):
    accepted = 0

    def get_request(self):
        request = super().get_request()
        self.accepted += 1
        return request


@pytest.fixture
def engine_server():
    server = _CountingServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def tcp_engine(engine_server):
    return f"tcp://127.0.0.1:{engine_server.server_address[1]}"


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


def test_a_new_client_negotiates_and_calls_over_one_connection(engine_server, tcp_engine):
    """Over TLS every connection is a handshake: the version negotiation's connection is
    the one the calls reuse (it was dropped, and a second one made, before)."""
    engine = DockerEngine(tcp_engine)
    assert engine.ping()
    assert engine.ping()
    assert engine._api().api_version == "1.43"
    assert engine_server.accepted == 1
