"""Request kinds and their queues (containers/queues.py), as the relay has them registered."""

from __future__ import annotations

import pytest

from containers.queues import Queue, RequestKind
from outbox import registry

# The contract's placement (§4): create and start on "create", stop and delete on "control".
EXPECTED = {
    "ContainerCreateRequest": "create",
    "ContainerStartRequest": "create",
    "ContainerStopRequest": "control",
    "ContainerDeleteRequest": "control",
}


@pytest.mark.parametrize("kind", list(RequestKind))
def test_each_request_kind_is_registered_on_its_queue(kind):
    route = registry.route(kind)
    assert route is not None, f"{kind} has no handler"
    assert (route.queue, kind.queue) == (EXPECTED[kind], EXPECTED[kind])


def test_both_queues_are_registered_with_workers():
    queues = registry.queues()
    assert set(Queue) <= set(queues), queues
    assert all(queues[q] >= 1 for q in Queue), queues
