"""The installation id: made unique at the first migrate, owned on the engines, shown.

Also the one actor vocabulary the same migration brings old history rows to.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.apps import apps
from django.urls import reverse

from containers.engines import engine_for
from containers.engines.base import ContainerSpec
from containers.execution.reconciler import reconcile
from containers.installation import LEGACY_ID, installation_id
from containers.models import ContainerEvent, Installation, OrphanContainer, Runtime
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[2]
MIGRATION = importlib.import_module("containers.migrations.0006_installation_and_actors")


def _fresh_installation_id(tmp_path: Path, name: str) -> subprocess.Popen:
    env = {
        "PATH": os.environ["PATH"],
        "GOBRAVE_SQLITE_PATH": str(tmp_path / f"{name}.sqlite3"),
        "GOBRAVE_CONTAINER_WORKSPACE_ROOT": str(tmp_path / "ws"),
    }
    script = (
        "from django.core.management import call_command;"
        "call_command('migrate', verbosity=0);"
        "from containers.installation import installation_id;"
        "print(installation_id())"
    )
    return subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow  # real manage.py processes
def test_two_fresh_installations_get_different_ids_at_their_first_migrate(tmp_path):
    runs = [_fresh_installation_id(tmp_path, name) for name in ("one", "two")]
    ids = []
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        ids.append(out.strip().splitlines()[-1])
    assert all(value.startswith("gb-") and len(value) == 15 for value in ids), ids
    assert ids[0] != ids[1]


def test_a_database_with_instances_keeps_the_former_default_at_the_upgrade():
    InstanceFactory()
    Installation.objects.all().delete()
    MIGRATION.make_installation(apps, None)
    assert Installation.objects.get().installation_id == LEGACY_ID


def test_a_new_database_gets_a_random_id_and_keeps_it():
    Installation.objects.all().delete()
    MIGRATION.make_installation(apps, None)
    made = Installation.objects.get().installation_id
    MIGRATION.make_installation(apps, None)
    assert made.startswith("gb-") and Installation.objects.get().installation_id == made
    assert installation_id() == made


def test_configured_id_wins_and_a_missing_row_is_made_again(gobrave_config):
    Installation.objects.all().delete()
    made = installation_id()
    assert Installation.objects.get().installation_id == made
    gobrave_config(container={"installation_id": "site-a"})
    assert installation_id() == "site-a"


def test_containers_of_another_installation_on_the_same_engine_are_not_orphans(
    fake_runtime, gobrave_config
):
    Runtime.objects.filter(name="local").delete()  # the real engine's row: stay off it
    gobrave_config(container={"orphan_policy": "remove"})
    engine = engine_for(fake_runtime)
    theirs = engine.create(
        ContainerSpec(
            name=f"gb-{uuid.uuid4()}",
            image="busybox",
            labels={"io.gobrave.installation": "gb-someoneelse", "io.gobrave.instance": "x"},
        )
    )
    ours = engine.create(
        ContainerSpec(
            name=f"gb-{uuid.uuid4()}",
            image="busybox",
            labels={"io.gobrave.installation": installation_id(), "io.gobrave.instance": "y"},
        )
    )
    reconcile()
    orphans = list(OrphanContainer.objects.values_list("container_id", flat=True))
    assert orphans == [ours], orphans
    assert engine.inspect(theirs) is not None, "another installation's container was touched"


def test_the_admin_index_shows_the_installation_id(client, django_user_model):
    root = django_user_model.objects.create_superuser("root", "r@example.com", "pw-123456")
    client.force_login(root)
    page = client.get(reverse("admin:index")).content.decode()
    assert f'<code id="gobrave-installation-id">{installation_id()}</code>' in page


def test_old_actor_spellings_become_user_names_and_system_actors_stay():
    spelled = ["admin:alice", "cli:root", "bob", "worker", "monitor", "reconciler", "relay", ""]
    for actor in spelled:
        ContainerEvent.objects.create(
            instance_id=uuid.uuid4(), instance_name="x", kind="k", actor=actor
        )
    MIGRATION.rename_actors(apps, None)
    after = sorted(ContainerEvent.objects.values_list("actor", flat=True))
    assert after == sorted(
        ["user:alice", "user:root", "user:bob", "worker", "monitor", "reconciler", "relay", ""]
    )
