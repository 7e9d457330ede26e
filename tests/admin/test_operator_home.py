"""The admin index as an operator's home: counts that lead to their filtered lists."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from containers import selectors
from containers.models import Runtime
from containers.states import Status
from outbox.models import OutboxStatus
from tests.admin.conftest import make_user
from tests.factories import InstanceFactory, RequestFactory, RuntimeFactory

pytestmark = pytest.mark.django_db


def _world():
    """2 running, 1 pending, 1 failed now and 1 failed yesterday; 2 dead letters;
    3 enabled runtimes of which 2 reachable, and a disabled reachable one."""
    now = timezone.now()
    Runtime.objects.update(enabled=False)  # a row the migrations made, if any
    reachable = RuntimeFactory(health=Runtime.Health.REACHABLE)
    RuntimeFactory(health=Runtime.Health.REACHABLE)
    RuntimeFactory(health=Runtime.Health.UNREACHABLE)
    RuntimeFactory(health=Runtime.Health.REACHABLE, enabled=False)
    InstanceFactory.create_batch(2, status=Status.RUNNING, runtime=reachable)
    InstanceFactory(status=Status.PENDING, runtime=reachable)
    for ago in (dt.timedelta(minutes=5), dt.timedelta(hours=25)):
        InstanceFactory(status=Status.FAILED, status_changed_at=now - ago, runtime=reachable)
    RequestFactory.create_batch(2, status=OutboxStatus.DEAD)


def _tile(html: str, key: str) -> tuple[str, str]:
    """The (href, number) of the index's tile ``key``."""
    match = re.search(
        rf'<a id="gb-home-{key}" href="([^"]+)"[^>]*>\s*<span class="gb-num">([^<]+)</span>',
        html,
    )
    assert match, f"no {key} tile"
    return match.group(1).replace("&amp;", "&"), match.group(2).strip()


def test_counts_come_from_one_selector_in_three_queries(django_assert_num_queries):
    _world()
    with django_assert_num_queries(3):
        counts = selectors.operator_home_counts(instances=True, dead_letters=True, engines=True)
    assert counts == {
        "running": 2,
        "pending": 1,
        "failed_last_hour": 1,
        "dead_letters": 2,
        "engines_reachable": 2,
        "engines_enabled": 3,
    }


def test_selector_counts_only_what_it_is_asked_for(django_assert_num_queries):
    _world()
    with django_assert_num_queries(1):
        counts = selectors.operator_home_counts(instances=False, dead_letters=True, engines=False)
    assert counts == {"dead_letters": 2}


def test_index_shows_each_count_with_a_link_to_its_filtered_list(as_user, superuser):
    _world()
    html = as_user(superuser).get(reverse("admin:index")).content.decode()
    instances = reverse("admin:containers_containerinstance_changelist")
    assert _tile(html, "running") == (f"{instances}?status__exact=running", "2")
    assert _tile(html, "pending") == (f"{instances}?status__exact=pending", "1")
    assert _tile(html, "failed") == (f"{instances}?status__exact=failed&changed=1h", "1")
    outbox = reverse("admin:outbox_outboxevent_changelist")
    assert _tile(html, "dead") == (f"{outbox}?status__exact=dead", "2")
    runtimes = reverse("admin:containers_runtime_changelist")
    assert _tile(html, "engines") == (
        f"{runtimes}?enabled__exact=1&health__exact=reachable",
        "2 of 3",
    )


def test_failed_in_the_last_hour_link_lists_exactly_those(as_user, superuser):
    _world()
    client = as_user(superuser)
    href, _ = _tile(client.get(reverse("admin:index")).content.decode(), "failed")
    page = client.get(href)
    assert page.status_code == 200
    assert page.context["cl"].result_count == 1
    assert page.context["cl"].result_list[0].status_changed_at > timezone.now() - dt.timedelta(
        hours=1
    )


def test_engines_link_lists_the_reachable_enabled_runtimes(as_user, superuser):
    _world()
    client = as_user(superuser)
    href, _ = _tile(client.get(reverse("admin:index")).content.decode(), "engines")
    page = client.get(href)
    assert page.status_code == 200
    assert page.context["cl"].result_count == 2


def test_viewer_of_instances_only_sees_no_dead_letters_nor_engines(as_user):
    _world()
    perms = Permission.objects.filter(
        content_type__app_label="containers", codename="view_containerinstance"
    )
    user = make_user("instances-only", perms=perms)
    html = as_user(user).get(reverse("admin:index")).content.decode()
    assert _tile(html, "running")[1] == "2"
    assert 'id="gb-home-dead"' not in html
    assert 'id="gb-home-engines"' not in html


def test_viewer_of_the_outbox_only_sees_dead_letters_and_no_instance_counts(as_user):
    _world()
    perms = Permission.objects.filter(content_type__app_label="outbox", codename="view_outboxevent")
    user = make_user("outbox-only", perms=perms)
    html = as_user(user).get(reverse("admin:index")).content.decode()
    assert _tile(html, "dead")[1] == "2"
    for key in ("running", "pending", "failed", "engines"):
        assert f'id="gb-home-{key}"' not in html


def test_index_query_count_is_pinned(as_user, superuser, django_assert_num_queries):
    client = as_user(superuser)
    _world()
    # Session, user, the three counts, the installation id, the recent actions.
    with django_assert_num_queries(7):
        client.get(reverse("admin:index"))
    InstanceFactory.create_batch(10, status=Status.RUNNING)
    RequestFactory.create_batch(5, status=OutboxStatus.DEAD)
    with django_assert_num_queries(7):
        client.get(reverse("admin:index"))
