"""Shared fixtures. The suite runs on PostgreSQL (DATABASE_URL); see README."""

from __future__ import annotations

import copy
import os

import pytest
from django.conf import settings
from django.db import connection

from core.counters import counters_buffer_stop
from tests.factories import RuntimeFactory, TemplateFactory, UserFactory

IN_CI = os.environ.get("CI", "").lower() == "true"

# The Kubernetes emulator's fixtures (kube_cluster, kube): tests/kube/fixtures.py.
pytest_plugins = ["tests.kube.fixtures"]


# The longest tests first: a parallel run (pytest-xdist, ``--dist load``) hands tests out
# in this order, so the soak and the browser runs start at once and the short tests fill
# the gaps, instead of one long test starting last and running alone.
FIRST = ("chaos", "browser", "slow", "docker")


def _rank(item) -> int:
    for rank, marker in enumerate(FIRST):
        if item.get_closest_marker(marker) is not None:
            return rank
    return len(FIRST)


# A test that uses one of these fixtures talks to a real Docker engine (the machine's or
# a private one): it is marked ``docker`` whether or not its module says so, so that
# ``make test-fast`` (``-m "not docker and not slow ..."``) never waits on an engine.
ENGINE_FIXTURES = {"docker_client", "dock", "private_dock", "gated_dock", "pipeline"}


def pytest_collection_modifyitems(config, items):
    if IN_CI and "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        raise pytest.UsageError("CI=true: the suite must run on PostgreSQL (set DATABASE_URL)")
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)
    items.sort(key=_rank)  # stable: file order within a rank


@pytest.fixture(autouse=True)
def _no_counter_buffering_leaks():
    """A test that runs a dispatcher or a pusher in this process starts its counters' flush
    thread; stop it at the end, so it never writes into a later test's database state."""
    yield
    counters_buffer_stop()


@pytest.fixture(autouse=True)
def _webhook_names_never_looked_up(monkeypatch):
    """No test sends traffic beyond loopback, DNS included: a webhook URL's host is
    resolved only when it is an address or ``localhost`` (both answered locally); any other
    name does not resolve (a test that needs one answers it itself). Generated input (the
    schemathesis run) would otherwise send its random host names to the DNS server."""
    import ipaddress
    import socket

    from webhooks import addresses

    def lookup(host: str, port: int) -> list[tuple]:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if host != "localhost":
                raise socket.gaierror(socket.EAI_NONAME, "not looked up in tests") from None
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)

    monkeypatch.setattr(addresses, "lookup", lookup)


@pytest.fixture(scope="session")
def live_server(django_db_blocker):
    """uvicorn serving the ASGI application production serves (tests/asgi_server.py), in
    place of pytest-django's WSGI server; its autouse helper makes each test using it
    transactional, as before."""
    from tests.asgi_server import AsgiLiveServer

    with django_db_blocker.unblock():
        server = AsgiLiveServer()
    yield server
    server.stop()


@pytest.fixture
def postgres():
    """Skip (or fail in CI) a test that needs PostgreSQL's locking."""
    if connection.vendor != "postgresql":
        if IN_CI:
            pytest.fail("this test needs PostgreSQL and CI=true")
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://postgres@127.0.0.1:5432/test")


@pytest.fixture
def gobrave_config():
    """Change settings.GOBRAVE keys for one test: ``gobrave_config(container={...})``."""
    saved = copy.deepcopy(settings.GOBRAVE)

    def change(**sections):
        for section, values in sections.items():
            settings.GOBRAVE[section].update(values)
            if section == "outbox":
                settings.OUTBOX.update(values)

    yield change
    for section, values in saved.items():
        settings.GOBRAVE[section].clear()
        settings.GOBRAVE[section].update(values)
    settings.OUTBOX.clear()
    settings.OUTBOX.update(saved["outbox"])


@pytest.fixture
def fake_runtime(tmp_path):
    return RuntimeFactory(name="fake", base_url=f"fake://{tmp_path / 'engine'}")


@pytest.fixture
def template(fake_runtime):
    return TemplateFactory(name="sleeper")


@pytest.fixture
def owner():
    return UserFactory(username="alice")
