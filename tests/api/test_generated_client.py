"""A client generated from the schema with openapi-python-client works end to end: it
creates an instance, stops it and deletes it against a live server (the fake engine;
the requests run in this process through the relay). The generated functions carry the
schema's operation ids (``containers_stop``, not ``containers_stop_create``) and every
answer parses into the generated models, so the schema says what the API does."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from containers.models import ContainerInstance
from tests.factories import UserFactory, api_token
from tests.processes import relay_drain

pytestmark = pytest.mark.django_db(transaction=True)

GENERATOR = Path(sys.executable).with_name("openapi-python-client")
PACKAGE = "gobrave_client"


def _schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(public=True)))


@pytest.fixture
def client_package(tmp_path):
    """The generated package, importable for the test's length."""
    (tmp_path / "schema.json").write_text(json.dumps(_schema()))
    (tmp_path / "config.yml").write_text("post_hooks: []\n")  # no ruff run on the output
    generated = subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path",
            "schema.json",
            "--config",
            "config.yml",
            "--meta",
            "none",
            "--output-path",
            PACKAGE,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _settle() -> list[str]:
    """Run the queued requests on the fake engine, as the workers would."""
    return relay_drain()


def test_a_generated_client_creates_stops_and_deletes_an_instance(
    client_package, live_server, template
):
    user = UserFactory(username="alice")
    key = api_token(user)
    models = importlib.import_module(f"{PACKAGE}.models")
    client = importlib.import_module(PACKAGE).AuthenticatedClient(
        base_url=live_server.url, token=key, prefix="Token", raise_on_unexpected_status=True
    )
    create = importlib.import_module(f"{PACKAGE}.api.containers.containers_create")
    stop = importlib.import_module(f"{PACKAGE}.api.containers.containers_stop")
    destroy = importlib.import_module(f"{PACKAGE}.api.containers.containers_destroy")
    retrieve = importlib.import_module(f"{PACKAGE}.api.containers.containers_retrieve")

    body = models.InstanceCreateInputRequest(template="sleeper", name="from-client")
    created = create.sync_detailed(client=client, body=body)
    assert created.status_code == 202, created.content
    accepted = created.parsed
    assert isinstance(accepted, models.InstanceAccepted), accepted
    assert (accepted.name, accepted.status.value, accepted.queued) == (
        "from-client",
        "pending",
        True,
    )
    assert _settle() == ["sent"]
    shown = retrieve.sync(accepted.id, client=client)
    assert shown.status.value == "running", shown

    stopped = stop.sync_detailed(accepted.id, client=client)
    assert stopped.status_code == 202, stopped.content
    assert stopped.parsed.status.value == "stop_pending", stopped.parsed
    assert _settle() == ["sent"]
    assert retrieve.sync(accepted.id, client=client).status.value == "stopped"

    deleted = destroy.sync_detailed(accepted.id, client=client)
    assert deleted.status_code == 202, deleted.content
    assert deleted.parsed.status.value == "delete_pending", deleted.parsed
    assert _settle() == ["sent"]
    assert not ContainerInstance.objects.filter(pk=accepted.id).exists()
    gone = retrieve.sync_detailed(accepted.id, client=client)
    assert gone.status_code == 404, gone.content
    assert gone.parsed.error.code == "not_found", gone.parsed
