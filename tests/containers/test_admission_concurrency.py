"""maxPending under real concurrency: 200 simultaneous creates, limit 50, exactly 50 in."""

from __future__ import annotations

import pytest
from django.db import connection

from containers.errors import QueueFull
from containers.models import ContainerEvent, ContainerInstance
from containers.requests.services import container_create_by_template
from outbox.models import OutboxEvent
from tests.factories import RuntimeFactory, TemplateFactory, UserFactory
from tests.processes import released_at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

CALLERS = 200
LIMIT = 50


def _round(templates, owners) -> list[str]:
    def call(index: int) -> str:
        try:
            container_create_by_template(
                template=templates[index % len(templates)],
                owner=owners[index % len(owners)],
                actor="test",
            )
            return "accepted"
        except QueueFull:
            return "refused"
        except Exception as exc:  # noqa: BLE001 - any other error fails the test below
            return f"error: {exc!r}"
        finally:
            connection.close()  # back to the pool

    return released_at_once(call, CALLERS)


def test_200_simultaneous_creates_admit_exactly_50(postgres, gobrave_config):
    gobrave_config(container={"create_queue_max_pending": LIMIT})
    for name in ("a", "b"):
        RuntimeFactory(name=f"engine-{name}", labels={"engine": "fake"})
    templates = [TemplateFactory(name=f"t{i}") for i in range(3)]
    owners = [UserFactory(username=f"owner{i}") for i in range(5)]
    for _round_number in range(3):
        outcomes = _round(templates, owners)
        assert len(outcomes) == CALLERS
        assert outcomes.count("accepted") == LIMIT, [o for o in outcomes if "error" in o][:3]
        assert outcomes.count("refused") == CALLERS - LIMIT
        assert ContainerInstance.objects.filter(status="pending").count() == LIMIT
        assert OutboxEvent.objects.count() == LIMIT
        assert ContainerEvent.objects.count() == LIMIT
        # Not placed yet: an engine is chosen when a create leaves pending (its slot).
        used = ContainerInstance.objects.values_list("runtime__name", flat=True).distinct()
        assert set(used) == {None}
        # Drain the queue (as workers would) and go again.
        ContainerInstance.objects.all().delete()
        OutboxEvent.objects.all().delete()
        ContainerEvent.objects.all().delete()
