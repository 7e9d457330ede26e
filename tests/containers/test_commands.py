"""The manage.py request commands go through the services and exit non-zero on refusal."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from containers.models import ContainerInstance
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[2]


def _call(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_command_queues_a_create(template, owner):
    template.user_env = ["A"]
    template.save(update_fields=["user_env"])
    output = _call("container_create", "--template", "sleeper", "--user", "alice", "--env", "A=1")
    instance = ContainerInstance.objects.get()
    assert f"accepted {instance.id}" in output
    assert instance.spec["env"] == {"A": "1"}
    assert OutboxEvent.objects.get().kind == "ContainerCreateRequest"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--template", "nope", "--user", "alice"], "no template 'nope'"),
        (["--template", "sleeper", "--user", "nobody"], "no user 'nobody'"),
        (["--template", "sleeper", "--user", "alice", "--env", "NOEQUALS"], "NAME=VALUE"),
    ],
)
def test_create_command_refusals(template, owner, args, message):
    with pytest.raises(CommandError, match=message):
        _call("container_create", *args)
    assert ContainerInstance.objects.count() == 0


def test_create_command_refused_when_queue_full(template, owner, gobrave_config):
    gobrave_config(container={"create_queue_max_pending": 1})
    _call("container_create", "--template", "sleeper", "--user", "alice")
    with pytest.raises(CommandError, match="queue is full"):
        _call("container_create", "--template", "sleeper", "--user", "alice")


def test_stop_start_delete_commands():
    instance = InstanceFactory()
    ContainerInstance.objects.filter(pk=instance.pk).update(status="running")
    assert "accepted" in _call("container_stop", str(instance.pk))
    assert "already under way" in _call("container_stop", str(instance.pk))
    with pytest.raises(CommandError, match="cannot start .* stop_pending"):
        _call("container_start", str(instance.pk))
    assert "accepted" in _call("container_delete", str(instance.pk))
    assert ContainerInstance.objects.get().status == "delete_pending"
    assert OutboxEvent.objects.count() == 2


def test_list_command_filters_by_status():
    running = InstanceFactory(name="up")
    ContainerInstance.objects.filter(pk=running.pk).update(status="running")
    InstanceFactory(name="waiting")
    output = _call("container_list", "--status", "running")
    assert "up" in output and "waiting" not in output
    with pytest.raises(CommandError, match="unknown status bogus"):
        _call("container_list", "--status", "bogus")


def test_quick_start_on_sqlite_needs_nothing_installed(tmp_path):
    """The zero-setup default: migrate and queue a create on a SQLite file."""
    env = {
        "PATH": os.environ["PATH"],
        "GOBRAVE_SQLITE_PATH": str(tmp_path / "quick.sqlite3"),
        "GOBRAVE_CONTAINER_WORKSPACE_ROOT": str(tmp_path / "ws"),
    }

    def manage(*args):
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout

    manage("migrate", "-v0")
    manage(
        "shell",
        "-c",
        (
            "from django.contrib.auth.models import User;"
            "from containers.models import ContainerTemplate as T;"
            "User.objects.create(username='bob');"
            "T.objects.create(name='hello', image='busybox', constraints={'engine': 'docker'})"
        ),
    )
    assert "accepted" in manage("container_create", "--template", "hello", "--user", "bob")
    assert "pending" in manage("container_list")
    journal = subprocess.run(
        [
            "python3",
            "-c",
            f"import sqlite3;print(sqlite3.connect('{tmp_path}/quick.sqlite3')"
            ".execute('pragma journal_mode').fetchone()[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert journal == "wal"
