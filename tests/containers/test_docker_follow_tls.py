"""``DockerEngine`` over TCP with mutual TLS (``TLSFiles``): the async follow and the sync
client verify the engine with the same files.

An aiohttp server with a certificate of a test CA, which requires a client certificate,
stands in for an engine reached over TCP (as tests/containers/test_engine_keepalive.py
does for keepalives): it answers the version, an inspect, and a followed output in
Docker's multiplexed frames. Certificates are made with the ``openssl`` command.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from aiohttp import web

from containers.engines.base import EngineError
from containers.engines.docker import DockerEngine, TLSFiles

FRAMES = [(1, b"out\n"), (2, b"err\n"), (1, b""), (1, b"more\n")]  # (stream, payload)


KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")  # fast to make


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        "req", "-x509", *KEY, "-days", "1", "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=directory,
    )  # fmt: skip


def _signed(directory: Path, ca: str, name: str, extension: str) -> None:
    (directory / f"{name}.ext").write_text(extension + "\n")
    _openssl(
        "req", *KEY, "-subj", f"/CN={name}",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.pem",
        cwd=directory,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, the engine's certificate (for 127.0.0.1), a client's, and a foreign CA."""
    directory = tmp_path_factory.mktemp("pki")
    _ca(directory, "ca")
    _ca(directory, "foreign")
    _signed(directory, "ca", "engine", "subjectAltName=IP:127.0.0.1")
    _signed(directory, "ca", "client", "extendedKeyUsage=clientAuth")
    return directory


def _files(pki: Path, ca: str = "ca") -> TLSFiles:
    return TLSFiles(
        ca_cert=str(pki / f"{ca}.pem"),
        client_cert=str(pki / "client.pem"),
        client_key=str(pki / "client.key"),
    )


async def _engine_server(pki: Path, clients: list[str]) -> tuple[web.AppRunner, int]:
    """The stand-in engine; ``clients`` gets the CN of each client certificate seen."""

    def seen(request: web.Request) -> None:
        cert = request.transport.get_extra_info("peercert") or {}
        clients.extend(v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName")

    async def version(request: web.Request) -> web.Response:
        seen(request)
        return web.json_response({"ApiVersion": "1.41", "Version": "20.10"})

    async def ping(request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def inspect(request: web.Request) -> web.Response:
        if request.match_info["ref"] != "c1":
            return web.json_response({"message": "No such container"}, status=404)
        return web.json_response({"Id": "c1id", "Config": {"Tty": False}})

    async def logs(request: web.Request) -> web.StreamResponse:
        assert request.query["follow"] in ("1", "True", "true"), request.query
        response = web.StreamResponse(headers={"Content-Type": "application/vnd.docker.raw-stream"})
        await response.prepare(request)
        for stream, payload in FRAMES:
            await response.write(bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big"))
            await response.write(payload)
        await response.write_eof()  # the container stopped
        return response

    app = web.Application()
    app.router.add_get("/version", version)
    app.router.add_get("/v1.41/version", version)
    app.router.add_get("/_ping", ping)
    app.router.add_get("/v1.41/_ping", ping)
    app.router.add_get("/v1.41/containers/{ref}/json", inspect)
    app.router.add_get("/v1.41/containers/{ref}/logs", logs)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.pem"))
    context.load_cert_chain(str(pki / "engine.pem"), str(pki / "engine.key"))
    context.verify_mode = ssl.CERT_REQUIRED
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - the port given


def test_a_follow_over_mutual_tls_reads_the_frames_of_stdout_and_stderr(pki) -> None:
    clients: list[str] = []

    async def follow() -> tuple[list[bytes], bool]:
        runner, port = await _engine_server(pki, clients)
        try:
            engine = DockerEngine(f"tcp://127.0.0.1:{port}", timeout=10, tls=_files(pki))
            stream = await engine.follow_logs("c1", tail=10, until=time.time() + 60)
            async with asyncio.timeout(30):
                chunks = [chunk async for chunk in stream]
            answers = await asyncio.to_thread(engine.ping)  # the sync client, same files
            return chunks, answers
        finally:
            await runner.cleanup()

    chunks, answers = asyncio.run(follow())
    assert chunks == [b"out\n", b"err\n", b"more\n"]
    assert answers is True
    assert set(clients) == {"client"}, clients  # both clients showed their certificate


def test_an_engine_whose_certificate_another_ca_signed_is_refused_on_open(pki) -> None:
    async def follow() -> None:
        runner, port = await _engine_server(pki, [])
        try:
            engine = DockerEngine(f"tcp://127.0.0.1:{port}", timeout=10, tls=_files(pki, "foreign"))
            await engine.follow_logs("c1", tail=10, until=time.time() + 60)
        finally:
            await runner.cleanup()

    with pytest.raises(EngineError, match="(?i)certificate"):
        asyncio.run(follow())


def test_a_missing_container_over_tls_is_an_empty_stream(pki) -> None:
    async def follow() -> list[bytes]:
        runner, port = await _engine_server(pki, [])
        try:
            engine = DockerEngine(f"tcp://127.0.0.1:{port}", timeout=10, tls=_files(pki))
            stream = await engine.follow_logs("gone", tail=10, until=time.time() + 60)
            return [chunk async for chunk in stream]
        finally:
            await runner.cleanup()

    assert asyncio.run(follow()) == []
