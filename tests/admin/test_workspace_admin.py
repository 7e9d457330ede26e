"""Owners' workspaces in the admin: listed with engine, owner and the size the engine
last said (measured by an action, never while drawing the list); removed only for an
owner with no instances left, through ``workspace_remove``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.urls import reverse

from containers.models import ContainerEvent, Workspace
from tests.admin.conftest import make_user
from tests.factories import InstanceFactory, UserFactory

pytestmark = pytest.mark.django_db

LIST = "admin:containers_workspace_changelist"


@pytest.fixture
def engine_root(fake_runtime) -> Path:
    root = Path(fake_runtime.base_url.removeprefix("fake://"))
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture
def bob():
    return UserFactory(username="bob")


@pytest.fixture
def workspace(fake_runtime, bob):
    return Workspace.objects.create(
        runtime=fake_runtime, owner=bob, kind="volume", source="gb-ws-x-9", uid=1009, gid=1009
    )


@pytest.fixture
def remover(client):
    user = make_user(
        "cleaner",
        perms=Permission.objects.filter(codename__in=["view_workspace", "delete_workspace"]),
    )
    client.force_login(user)
    return client


def _act(client, action: str, *rows):
    return client.post(reverse(LIST), {"action": action, "_selected_action": [r.pk for r in rows]})


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_the_list_shows_engine_owner_and_the_size_once_measured(remover, workspace, engine_root):
    page = remover.get(reverse(LIST)).content.decode()
    assert "gb-ws-x-9" in page and "fake" in page and "bob" in page
    assert "not measured" in page
    (engine_root / "volume-sizes.json").write_text(json.dumps({"gb-ws-x-9": 3 * 1024 * 1024}))
    response = _act(remover, "measure_sizes", workspace)
    assert response.status_code == 302, _messages(response)
    workspace.refresh_from_db()
    assert workspace.size_bytes == 3 * 1024 * 1024, workspace.size_bytes
    page = remover.get(reverse(LIST)).content.decode()
    assert "3.0\xa0MB" in page, page[page.find("gb-ws-x-9") :][:600]


def test_a_volume_the_engine_does_not_measure_says_so(remover, workspace, engine_root):
    _act(remover, "measure_sizes", workspace)
    workspace.refresh_from_db()
    assert (workspace.size_bytes, workspace.size_checked_at is not None) == (None, True)
    assert "the engine does not say" in remover.get(reverse(LIST)).content.decode()


def test_measuring_many_workspaces_writes_them_in_one_statement(fake_runtime, bob, engine_root):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from containers.execution.workspaces import workspace_sizes_refresh

    rows = [
        Workspace.objects.create(
            runtime=fake_runtime, owner=bob, kind="volume", source=f"gb-ws-n-{i}", uid=1, gid=1
        )
        for i in range(40)
    ]
    sizes = {row.source: 1000 + i for i, row in enumerate(rows) if i % 2 == 0}
    (engine_root / "volume-sizes.json").write_text(json.dumps(sizes))
    with CaptureQueriesContext(connection) as queries:
        assert workspace_sizes_refresh(workspaces=rows) == []
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(writes) == 1, [sql[:120] for sql in writes]
    got = dict(Workspace.objects.values_list("source", "size_bytes"))
    assert got == {row.source: sizes.get(row.source) for row in rows}, got
    unchecked = Workspace.objects.filter(size_checked_at=None).values_list("source", flat=True)
    assert not unchecked, list(unchecked)


def test_drawing_the_list_never_asks_the_engine(remover, workspace, engine_root):
    remover.get(reverse(LIST))
    calls = engine_root / "calls.log"
    assert not calls.exists() or "volume_sizes" not in calls.read_text()


def test_the_workspace_of_an_owner_with_no_instances_is_removed_from_its_engine(
    remover, workspace, engine_root
):
    response = _act(remover, "remove_workspaces", workspace)
    assert response.status_code == 302
    assert _messages(response) == ["Removed 1 workspace(s)."], _messages(response)
    assert not Workspace.objects.filter(pk=workspace.pk).exists()
    assert (engine_root / "volumes-removed.log").read_text().splitlines() == ["gb-ws-x-9"]
    event = ContainerEvent.objects.get(kind="cleanup")
    assert "gb-ws-x-9" in event.message and event.actor == "user:cleaner", event.message


@pytest.mark.parametrize("status", ["stopped", "failed", "deleting"])
def test_an_owner_with_an_instance_left_keeps_the_workspace_and_is_told_why(
    remover, workspace, engine_root, bob, fake_runtime, status
):
    InstanceFactory(owner=bob, runtime=fake_runtime, status=status)
    response = _act(remover, "remove_workspaces", workspace)
    assert any("bob still has 1 instance" in t for t in _messages(response)), _messages(response)
    assert Workspace.objects.filter(pk=workspace.pk).exists()
    assert not (engine_root / "volumes-removed.log").exists()


def test_a_directory_workspace_is_not_removed_here(remover, fake_runtime, bob, engine_root):
    row = Workspace.objects.create(
        runtime=fake_runtime, owner=bob, kind="directory", source="/srv/ws/9", uid=9, gid=9
    )
    response = _act(remover, "remove_workspaces", row)
    assert any("directory on the host" in t for t in _messages(response)), _messages(response)
    assert Workspace.objects.filter(pk=row.pk).exists()


def test_an_engine_refusal_puts_the_row_back_and_says_why(remover, workspace, engine_root):
    (engine_root / "permanent-remove_volume").write_text("volume is in use")
    response = _act(remover, "remove_workspaces", workspace)
    assert any("volume is in use" in t for t in _messages(response)), _messages(response)
    assert Workspace.objects.filter(pk=workspace.pk, source="gb-ws-x-9").exists()


def test_a_user_who_may_only_view_gets_no_remove_action(client, workspace):
    client.force_login(
        make_user("looker", perms=Permission.objects.filter(codename="view_workspace"))
    )
    response = _act(client, "remove_workspaces", workspace)
    assert Workspace.objects.filter(pk=workspace.pk).exists()
    assert response.status_code in (200, 302)


def test_the_list_shows_which_retention_applies(remover, workspace):
    assert "kept" in remover.get(reverse(LIST)).content.decode()  # config.yml's: empty
    Workspace.objects.filter(pk=workspace.pk).update(retention=7200, retention_default=False)
    assert "2h once unused" in remover.get(reverse(LIST)).content.decode()
