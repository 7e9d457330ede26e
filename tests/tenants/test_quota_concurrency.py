"""Quotas under real concurrency: 200 simultaneous creates from several owners, a global
maxPending of 50 and a per-owner pending quota of 8, several rounds (PostgreSQL, threads).
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection

from containers.errors import OwnerQuotaExceeded, QueueFull
from containers.models import ContainerEvent, ContainerInstance
from containers.requests.services import container_create_by_template
from outbox.models import OutboxEvent
from tests.factories import TemplateFactory, UserFactory
from tests.processes import released_at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

CALLERS = 200
LIMIT = 50
QUOTA = 8


def _round(template, owners) -> list[tuple[str, str, int | None]]:
    """``(owner, outcome, retry_after)`` for each of 200 creates released at once."""

    def call(index: int) -> tuple[str, str, int | None]:
        owner = owners[index % len(owners)]
        try:
            container_create_by_template(template=template, owner=owner, actor="test")
            result = ("accepted", None)
        except (QueueFull, OwnerQuotaExceeded) as exc:
            result = (exc.code, exc.retry_after)
        except Exception as exc:  # noqa: BLE001 - any other error fails the test below
            result = (f"error: {exc!r}", None)
        finally:
            connection.close()
        return (owner.username, *result)

    return released_at_once(call, CALLERS)


def _assert_round(outcomes, owners, *, accepted_each: int | None) -> None:
    assert len(outcomes) == CALLERS
    errors = [o for o in outcomes if o[1].startswith("error")]
    assert not errors, errors[:3]
    accepted = Counter(owner for owner, outcome, _ in outcomes if outcome == "accepted")
    refused = [(outcome, retry) for _, outcome, retry in outcomes if outcome != "accepted"]
    assert max(accepted.values()) <= QUOTA, accepted
    assert sum(accepted.values()) <= LIMIT, accepted
    if accepted_each is not None:
        assert accepted == {owner.username: accepted_each for owner in owners}
    else:
        assert sum(accepted.values()) == LIMIT, accepted
    assert {outcome for outcome, _ in refused} <= {"owner_quota", "queue_full"}, refused[:3]
    assert all(retry is not None and retry >= 1 for _, retry in refused), refused[:3]
    stored = Counter(
        ContainerInstance.objects.filter(status="pending").values_list("owner__username", flat=True)
    )
    assert stored == accepted, (stored, accepted)
    # A refused request leaves no row anywhere.
    total = sum(accepted.values())
    counts = (
        ContainerInstance.objects.count(),
        OutboxEvent.objects.count(),
        ContainerEvent.objects.count(),
    )
    assert counts == (total, total, total), counts


def _drain() -> None:
    ContainerInstance.objects.all().delete()
    OutboxEvent.objects.all().delete()
    ContainerEvent.objects.all().delete()


def test_200_creates_from_many_owners_respect_quota_and_max_pending(
    postgres, gobrave_config, fake_runtime
):
    gobrave_config(container={"create_queue_max_pending": LIMIT, "max_pending_per_owner": QUOTA})
    template = TemplateFactory(name="t")
    five = [UserFactory(username=f"owner{i}") for i in range(5)]
    ten = five + [UserFactory(username=f"owner{i}") for i in range(5, 10)]
    # Five owners: each gets exactly its 8 (40 < 50). Ten owners: 80 > 50, so the queue
    # fills at exactly 50 with nobody above 8.
    for owners, each in ((five, QUOTA), (ten, None), (five, QUOTA), (ten, None)):
        _assert_round(_round(template, owners), owners, accepted_each=each)
        _drain()
