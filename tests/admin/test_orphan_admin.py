"""The orphan list's remove action: through a service, for those allowed to delete orphans."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.urls import reverse

from containers.models import ContainerEvent, OrphanContainer
from tests.admin.conftest import make_user

pytestmark = pytest.mark.django_db

LIST = "admin:containers_orphancontainer_changelist"


@pytest.fixture
def orphan(fake_runtime):
    return OrphanContainer.objects.create(
        runtime=fake_runtime, container_id="c0ffee", name="gb-left", status="running"
    )


def _engine_root(orphan) -> Path:
    return Path(orphan.runtime.base_url.removeprefix("fake://"))


def _remove(client, orphan):
    return client.post(reverse(LIST), {"action": "remove_orphans", "_selected_action": [orphan.pk]})


def test_a_user_allowed_to_delete_orphans_removes_one_from_its_engine(client, orphan):
    user = make_user(
        "cleaner",
        perms=Permission.objects.filter(
            codename__in=["view_orphancontainer", "delete_orphancontainer"]
        ),
    )
    client.force_login(user)
    response = _remove(client, orphan)
    assert response.status_code == 302
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert texts == ["Removed 1 orphan container(s)."], texts
    orphan.refresh_from_db()
    assert orphan.removed_at is not None
    assert "remove c0ffee" in (_engine_root(orphan) / "calls.log").read_text()
    event = ContainerEvent.objects.get(kind="cleanup")
    assert "gb-left" in event.message and event.actor == "user:cleaner"


def test_an_engine_refusal_is_a_message_and_the_orphan_stays(client, orphan):
    client.force_login(make_user("root", superuser=True))
    root = _engine_root(orphan)
    root.mkdir(parents=True, exist_ok=True)
    (root / "permanent-remove").write_text("daemon says no")
    response = _remove(client, orphan)
    assert response.status_code == 302
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert len(texts) == 1 and texts[0].startswith("gb-left: not removed: "), texts
    assert "daemon says no" in texts[0], texts
    orphan.refresh_from_db()
    assert orphan.removed_at is None


def test_a_viewer_of_orphans_is_not_offered_the_remove_action(client, orphan):
    user = make_user("looker", perms=Permission.objects.filter(codename="view_orphancontainer"))
    client.force_login(user)
    page = client.get(reverse(LIST))
    assert page.status_code == 200
    assert "remove_orphans" not in page.content.decode()
    _remove(client, orphan)
    orphan.refresh_from_db()
    assert orphan.removed_at is None
