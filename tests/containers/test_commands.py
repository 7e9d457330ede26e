"""The manage.py request commands go through the services and exit non-zero on refusal."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from containers.models import ContainerEvent, ContainerInstance
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory
from tests.processes import running_app

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


@pytest.mark.slow  # real manage.py processes
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


# --- as operators expect: short ids, names, --as, quiet logs, --wait --------------------------


def test_request_commands_accept_a_unique_id_prefix_or_a_name():
    instance = InstanceFactory(name="web-1", status="running")
    short = str(instance.id)[:8]
    assert f"stop {short} (web-1): accepted" in _call("container_stop", short)
    assert "already under way" in _call("container_stop", "web-1")
    assert "already under way" in _call("container_stop", str(instance.id).upper()[:13])


def test_an_ambiguous_or_unknown_reference_is_refused_and_changes_nothing():
    first = InstanceFactory(name="twin", status="running")
    InstanceFactory(name="twin", status="running")
    with pytest.raises(CommandError, match=r"'twin' matches several instances: .*give more"):
        _call("container_stop", "twin")
    with pytest.raises(CommandError, match="no container instance matches 'nothing'"):
        _call("container_stop", "nothing")
    with pytest.raises(CommandError, match="no container instance"):
        _call("container_stop", str(uuid.uuid4()))
    assert ContainerInstance.objects.get(pk=first.pk).status == "running"
    assert OutboxEvent.objects.count() == 0


def test_the_actor_is_the_user_who_asks(template, owner):
    _call("container_create", "--template", "sleeper", "--user", "alice", "--as", "ops")
    instance = ContainerInstance.objects.get()
    _call("container_delete", str(instance.id)[:8], "--as", "ops")
    actors = set(ContainerEvent.objects.values_list("actor", flat=True))
    assert actors == {"user:ops"}, actors


@pytest.mark.parametrize(("verbosity", "shown"), [(1, False), (2, True)])
def test_commands_log_only_warnings_unless_verbose(caplog, verbosity, shown):
    instance = InstanceFactory(status="running")
    root_level = logging.getLogger().level
    _call("container_stop", str(instance.id), f"--verbosity={verbosity}")
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert bool(infos) == shown, [r.getMessage() for r in infos]
    assert logging.getLogger().level == root_level  # restored for whatever runs next


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_wait_follows_each_request_until_it_settles(template, owner, tmp_path):
    config = {"outbox_poll_interval": "0.2", "queue_poll": "0.05", "container_stop_timeout": "1"}
    with running_app(tmp_path, **config) as app:
        app.dispatcher()
        app.cluster("create")
        app.cluster("control")
        created = app.manage(
            "container_create", "--template", "sleeper", "--user", "alice", "--wait"
        )
        assert created.returncode == 0, created.stdout + created.stderr
        lines = created.stdout
        assert "pending → creating" in lines and "creating → running" in lines, lines
        assert " INFO " not in created.stderr, created.stderr
        instance = ContainerInstance.objects.get()
        short = str(instance.id)[:8]

        stopped = app.manage("container_stop", short, "--wait")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert "running → stop_pending" in stopped.stdout, stopped.stdout
        assert "stopping → stopped" in stopped.stdout, stopped.stdout

        deleted = app.manage("container_delete", short, "--wait")
        assert deleted.returncode == 0, deleted.stdout + deleted.stderr
        assert "  deleted  " in deleted.stdout, deleted.stdout
        assert not ContainerInstance.objects.exists()


def test_wait_gives_up_after_its_timeout_with_the_state_named(template, owner):
    with pytest.raises(CommandError, match=r"create of .*: still pending after 0.3 s"):
        _call(
            "container_create",
            "--template",
            "sleeper",
            "--user",
            "alice",
            "--wait",
            "--timeout",
            "0.3",
        )


def test_a_history_line_without_a_move_says_its_kind_in_words():
    from django.utils import timezone

    from containers.management.commands._request import _history_line

    line = _history_line(
        ContainerEvent(kind="ContainerDeleted", actor="user:a", created_at=timezone.now())
    )
    assert "deleted" in line and "ContainerDeleted" not in line


def test_wait_shows_a_retry_in_words_with_its_reason():
    from django.utils import timezone

    from containers.management.commands._request import _history_line

    reason = "retrying (attempt 1 of 8): cannot pull image r/x:1: refused, next try in 1.2 s"
    line = _history_line(
        ContainerEvent(
            kind="retry",
            from_status="creating",
            actor="relay",
            message=reason,
            created_at=timezone.now(),
        )
    )
    assert "request retried" in line and line.endswith(reason), line
