"""Remote engines (issue 27, item 1): a private ``dockerd`` reached over mutual TLS, and
one reached over ``ssh://``, through ``Runtime`` rows; each way an engine can refuse us
gives the row a health reason an operator understands.

Engines: ``tests/private_engine.py`` (each in network and UTS namespaces of its own, so
``docker info``'s Name is the private engine's, never the machine's). Certificates:
``tests/pki.py`` (the ``openssl`` command). The whole module runs with
``REQUESTS_CA_BUNDLE`` and ``CURL_CA_BUNDLE`` pointing at an unrelated CA: the TLS
engine must answer through the runtime's own CA regardless. The ssh engine is reached
through an ``sshd`` of the test's own on a loopback port (``tests/private_sshd.py``)
whose sessions get ``DOCKER_HOST`` set to the private engine's socket. Over each, a container
runs and its output is followed (aiodocker over TLS; the sync client on a thread over ssh).
What one dockerd cannot be at once (an expired certificate, one for another name, a port
that speaks plain HTTP) is a listener of the test's own on a loopback port.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from containers.engines import engine_for
from containers.engines.base import ContainerSpec
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE
from containers.execution.health import runtime_health_check
from containers.models import Runtime
from tests.containers.conftest import IMAGE, _unavailable
from tests.pki import Pki
from tests.private_engine import TLS_PORT, PrivateDockerd, missing_tools
from tests.private_sshd import PrivateSshd, missing_sshd

pytestmark = [pytest.mark.django_db, pytest.mark.docker]


@pytest.fixture(scope="module", autouse=True)
def unrelated_ca_bundle(pki) -> Iterator[None]:
    """The environment names a CA that signed nothing of the engine's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REQUESTS_CA_BUNDLE", pki.cert("unrelated"))
        patch.setenv("CURL_CA_BUNDLE", pki.cert("unrelated"))
        patch.setenv("SSL_CERT_FILE", pki.cert("unrelated"))
        yield


@pytest.fixture(scope="module")
def tls_engine(tmp_path_factory) -> Iterator[PrivateDockerd]:
    if reason := missing_tools("openssl", "unshare"):
        _unavailable(reason)
    engine = PrivateDockerd("tls", tcp=True, hostname="gobrave-tls-engine")
    try:
        yield engine
    finally:
        engine.destroy()


@pytest.fixture(scope="module")
def pki(tmp_path_factory, tls_engine) -> Pki:
    """The CA, the engine's certificate (for its address), a client's; a foreign CA and a
    client it signed; an expired client certificate; an expired engine certificate; an
    unrelated CA (the environment's)."""
    pki = Pki(tmp_path_factory.mktemp("pki"))
    for ca in ("ca", "foreign", "unrelated"):
        pki.ca(ca)
    pki.signed("ca", "engine", f"subjectAltName=IP:{tls_engine.address}")
    pki.signed("ca", "client", "extendedKeyUsage=clientAuth")
    pki.signed("foreign", "stranger", "extendedKeyUsage=clientAuth")
    pki.signed("ca", "client-expired", "extendedKeyUsage=clientAuth", days=-1)
    pki.signed("ca", "engine-expired", "subjectAltName=IP:127.0.0.1", days=-1)
    return pki


@pytest.fixture(scope="module")
def tls_started(tls_engine, pki) -> PrivateDockerd:
    tls_engine.tls = (pki.cert("ca"), pki.cert("engine"), pki.key("engine"))
    tls_engine.start()
    return tls_engine


def _tls_runtime(engine: PrivateDockerd, pki: Pki, **fields) -> Runtime:
    values = {
        "name": "tls",
        "base_url": engine.url,
        "tls_ca_cert": pki.cert("ca"),
        "tls_client_cert": pki.cert("client"),
        "tls_client_key": pki.key("client"),
        "labels": {"engine": "tls"},
        **fields,
    }
    runtime = Runtime(**values)
    if values["tls_ca_cert"] or values["base_url"].startswith("tcp://127."):
        runtime.full_clean()  # every row an operator could save; the rest are made as-is
    runtime.save()
    return runtime


def _record(runtime: Runtime) -> str:
    row = Runtime.objects.get(pk=runtime.pk)
    return f"health={row.health} since={row.health_since} last_error={row.last_error!r}"


def test_a_tls_runtime_reaches_its_private_engine_whatever_the_environment_names(tls_started, pki):
    runtime = _tls_runtime(tls_started, pki)

    assert runtime_health_check(runtime=runtime, seconds=60), _record(runtime)
    row = Runtime.objects.get(pk=runtime.pk)
    assert (row.health, row.last_error) == (Runtime.Health.REACHABLE, ""), _record(runtime)
    assert engine_for(row).node_name() == "gobrave-tls-engine"


CASES = {
    "refused handshake (a client certificate the engine's CA did not sign)": (
        {"tls_client_cert": "stranger.pem", "tls_client_key": "stranger.key"},
        r"^the engine refused the TLS handshake: it does not accept our client certificate "
        r".*stranger\.pem",
    ),
    "wrong CA": (
        {"tls_ca_cert": "foreign.pem"},
        r"^wrong CA: the engine's certificate at 10\.251\.\d+\.2:2376 is not signed by the "
        r"CA in .*foreign\.pem",
    ),
    "expired client certificate": (
        {"tls_client_cert": "client-expired.pem", "tls_client_key": "client-expired.key"},
        r"^the engine refused the TLS handshake: our client certificate .*client-expired\.pem "
        r"expired on \d{4}-\d\d-\d\d \d\d:\d\d UTC: renew it$",
    ),
    "plain HTTP to the TLS port": (
        {"tls_ca_cert": "", "tls_client_cert": "", "tls_client_key": ""},
        r"^plain HTTP to a TLS port: the engine at 10\.251\.\d+\.2:2376 speaks TLS only",
    ),
    "closed port": (
        {"port": TLS_PORT + 1},
        r"^connection refused at 10\.251\.\d+\.2:2377: nothing listens there",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_refusal_gives_the_runtime_a_reason_an_operator_understands(tls_started, pki, case):
    changes, reason = CASES[case]
    fields = {
        key: str(pki.directory / value) if value else ""
        for key, value in changes.items()
        if key != "port"
    }
    if "port" in changes:
        fields["base_url"] = tls_started.url.replace(f":{TLS_PORT}", f":{changes['port']}")
    runtime = _tls_runtime(tls_started, pki, **fields)

    assert not runtime_health_check(runtime=runtime), _record(runtime)
    row = Runtime.objects.get(pk=runtime.pk)
    assert row.health == Runtime.Health.UNREACHABLE, _record(runtime)
    assert re.search(reason, row.last_error), _record(runtime)


def test_the_environment_naming_the_engines_own_ca_does_not_make_a_wrong_ca_right(
    tls_started, pki, monkeypatch
):
    """Verification cannot be weakened from outside: the CA bundles of the environment
    name the CA that did sign the engine, the runtime names another: refused."""
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.setenv(variable, pki.cert("ca"))
    runtime = _tls_runtime(tls_started, pki, name="weakened", tls_ca_cert=pki.cert("foreign"))

    assert not runtime_health_check(runtime=runtime), _record(runtime)
    row = Runtime.objects.get(pk=runtime.pk)
    assert row.last_error.startswith("wrong CA: the engine's certificate at "), _record(runtime)


@contextlib.contextmanager
def _listener(answer) -> Iterator[int]:
    """A server on a loopback port (yielded) that stands in for an engine: ``answer`` gets
    each accepted connection (closed after it); the server is gone after the block."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # the listener was closed: the test is over
            try:
                answer(connection)
            except (ssl.SSLError, OSError):
                pass  # the client gave up on the connection: what the test wants
            finally:
                connection.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # ends the accept() under way (close would not)
        listener.close()
        server.join(timeout=10)
        assert not server.is_alive()


def _speaks_tls(pki: Pki, name: str):
    """An ``answer`` that does the TLS handshake with certificate ``name`` of the pki."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.cert("ca"))
    context.load_cert_chain(pki.cert(name), pki.key(name))
    return lambda connection: context.wrap_socket(connection, server_side=True)


def _speaks_plain_http(connection: socket.socket) -> None:
    """What a plain HTTP server answers to bytes it cannot parse (a TLS ClientHello)."""
    connection.recv(4096)
    connection.sendall(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )


def _refused_with(runtime: Runtime, pattern: str) -> None:
    assert not runtime_health_check(runtime=runtime), _record(runtime)
    row = Runtime.objects.get(pk=runtime.pk)
    assert row.health == Runtime.Health.UNREACHABLE, _record(runtime)
    assert re.search(pattern, row.last_error), _record(runtime)


def test_an_expired_engine_certificate_is_named_as_such(tls_engine, pki):
    """The engine's own certificate expired: a TLS listener on loopback stands in for it
    (one dockerd has one certificate: the module's engine keeps its valid one)."""
    assert "notAfter" in pki.not_after("engine-expired")
    with _listener(_speaks_tls(pki, "engine-expired")) as port:
        runtime = _tls_runtime(tls_engine, pki, base_url=f"tcp://127.0.0.1:{port}")
        _refused_with(
            runtime, r"^the engine's certificate at 127\.0\.0\.1:\d+ has expired: renew it$"
        )


@pytest.mark.parametrize(
    "host, san",
    [("127.0.0.1", "IP:127.0.0.2"), ("localhost", "DNS:engine-3.example.net")],
)
def test_an_engine_certificate_for_another_name_is_named_as_such(tls_engine, pki, host, san):
    """Signed by the runtime's CA and valid, but its subjectAltName names another address
    (or host) than the runtime's URL: a TLS listener on loopback serves it."""
    name = f"engine-other-{san.split(':')[0].lower()}"
    pki.signed("ca", name, f"subjectAltName={san}")
    with _listener(_speaks_tls(pki, name)) as port:
        runtime = _tls_runtime(tls_engine, pki, name=name, base_url=f"tcp://{host}:{port}")
        _refused_with(
            runtime,
            rf"^the engine's certificate is not for {re.escape(host)}:{port}: its "
            r"subjectAltName must name the host or address in the runtime's URL$",
        )


def test_a_tls_runtime_at_a_port_that_speaks_plain_http_is_named_as_such(tls_engine, pki):
    """The runtime has its TLS files, the port answers in plain HTTP (not dockerd's TLS
    port: a plain HTTP listener on loopback)."""
    with _listener(_speaks_plain_http) as port:
        runtime = _tls_runtime(tls_engine, pki, base_url=f"tcp://127.0.0.1:{port}")
        _refused_with(
            runtime,
            rf"^TLS to a port that does not speak TLS: 127\.0\.0\.1:{port} answers in plain "
            r"text$",
        )


@pytest.fixture(scope="module")
def ssh_engine(tmp_path_factory) -> Iterator[tuple[PrivateDockerd, PrivateSshd]]:
    """A private engine (unix socket only) behind an sshd of the test's own; ``HOME`` is
    the sshd's client home (its key and known_hosts) for the module."""
    if reason := missing_tools("unshare") or missing_sshd():
        _unavailable(reason)
    engine = PrivateDockerd("ssh", hostname="gobrave-ssh-engine")
    sshd = PrivateSshd(tmp_path_factory.mktemp("sshd"), docker_host=engine.side_door)
    try:
        engine.start()
        sshd.start()
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HOME", str(sshd.home))
            yield engine, sshd
    finally:
        sshd.stop()
        engine.destroy()


def test_an_ssh_runtime_reaches_the_private_engine_through_dial_stdio(ssh_engine):
    engine, sshd = ssh_engine
    runtime = Runtime(name="ssh", base_url=f"ssh://root@127.0.0.1:{sshd.port}")
    runtime.full_clean()
    runtime.save()

    assert runtime_health_check(runtime=runtime, seconds=60), _record(runtime)
    info = engine_for(runtime)._api().info()  # noqa: SLF001 - which daemon answered
    assert (info["Name"], info["DockerRootDir"]) == (
        "gobrave-ssh-engine",
        str(engine.root / "data"),
    ), f"not the private engine: {info['Name']} {info['DockerRootDir']}"
    assert engine_for(runtime).list_ours("nobody-here") == []


def test_an_ssh_host_whose_key_is_unknown_is_refused_with_that_reason(ssh_engine):
    _, sshd = ssh_engine
    runtime = Runtime.objects.create(
        name="ssh-unknown", base_url=f"ssh://root@localhost:{sshd.port}"
    )

    assert not runtime_health_check(runtime=runtime), _record(runtime)
    row = Runtime.objects.get(pk=runtime.pk)
    assert re.search(
        rf"^ssh: the host key of root@localhost:{sshd.port} is not in known_hosts", row.last_error
    ), _record(runtime)


def test_an_ssh_host_that_refuses_our_key_is_named_with_that_reason(ssh_engine):
    _, sshd = ssh_engine
    url = f"ssh://no-such-user@127.0.0.1:{sshd.port}"
    runtime = Runtime.objects.create(name="ssh-refused", base_url=url)

    assert not runtime_health_check(runtime=runtime), _record(runtime)
    row = Runtime.objects.get(pk=runtime.pk)
    assert row.last_error.startswith(f"ssh: no-such-user@127.0.0.1:{sshd.port} refused our key"), (
        _record(runtime)
    )


def _remote_runtime(transport: str, request) -> tuple[Runtime, PrivateDockerd]:
    if transport == "tls":
        engine, pki = request.getfixturevalue("tls_started"), request.getfixturevalue("pki")
        return _tls_runtime(engine, pki, name="tls-run"), engine
    engine, sshd = request.getfixturevalue("ssh_engine")
    runtime = Runtime.objects.create(name="ssh-run", base_url=f"ssh://root@127.0.0.1:{sshd.port}")
    return runtime, engine


@pytest.mark.parametrize("transport", ["tls", "ssh"])
def test_a_container_runs_on_the_remote_engine_and_its_output_is_followed(
    transport, request, docker_client
):
    runtime, private = _remote_runtime(transport, request)
    private.load_image(IMAGE)
    engine = engine_for(runtime)
    name = f"gb-remote-{uuid.uuid4().hex[:8]}"
    spec = ContainerSpec(
        name=name,
        image=IMAGE,
        labels={LABEL_INSTALLATION: "remote-engines", LABEL_INSTANCE: name},
        command=["sh", "-c", "echo hello-over-$0", transport],
        pull_policy="never",
        network="none",
    )
    ref = engine.create(spec)
    try:
        engine.start(ref)

        async def follow() -> bytes:
            stream = await engine.follow_logs(ref, tail=10, until=time.time() + 60)
            return b"".join([chunk async for chunk in stream])  # ends as the container exits

        output = asyncio.run(follow())
        state = engine.inspect(ref)
    finally:
        engine.remove(ref)
    assert output == f"hello-over-{transport}\n".encode(), output
    assert (state.status, state.exit_code, state.node_name) == (
        "exited",
        0,
        f"gobrave-{transport}-engine",
    ), state
