"""contract §1, pair by pair: every allowed move succeeds, every other one is refused."""

from __future__ import annotations

import itertools

import pytest
from django_fsm import TransitionNotAllowed

from containers.models import ContainerInstance
from tests.factories import InstanceFactory

# The contract's table, written out again here on purpose: the code's table is tested
# against this copy, not against itself.
SPEC_TABLE = {
    "pending": {"creating", "failed", "delete_pending"},
    "creating": {"running", "failed", "stopped", "delete_pending"},
    "running": {"stopped", "stop_pending", "start_pending", "delete_pending", "paused", "failed"},
    "paused": {"running", "stopped", "stop_pending", "start_pending", "delete_pending", "failed"},
    "stop_pending": {"stopping", "delete_pending", "failed"},
    "stopping": {"stopped", "delete_pending", "failed"},
    "start_pending": {"starting", "stop_pending", "delete_pending", "failed"},
    "starting": {"running", "delete_pending", "failed"},
    "delete_pending": {"deleting", "failed"},
    "deleting": {"stopped", "failed"},
    "stopped": {"running", "start_pending", "delete_pending"},
    "failed": {"delete_pending"},
}
STATES = list(SPEC_TABLE)
ARGS = {"failed": {"reason": "test"}}

pytestmark = pytest.mark.django_db


def _instance_in(state: str) -> ContainerInstance:
    instance = InstanceFactory()
    ContainerInstance.objects.filter(pk=instance.pk).update(status=state)
    instance.refresh_from_db()  # FSMModelMixin lets a protected field refresh
    return instance


def test_the_model_knows_exactly_the_twelve_states():
    assert {value for value, _ in ContainerInstance._meta.get_field("status").choices} == set(
        STATES
    )


@pytest.mark.parametrize(
    ("source", "target"),
    [(s, t) for s, t in itertools.product(STATES, STATES) if t in SPEC_TABLE[s]],
)
def test_allowed_transition_succeeds_and_persists(source, target):
    instance = _instance_in(source)
    instance.transition_method(target)(**ARGS.get(target, {}))
    instance.save()
    assert ContainerInstance.objects.get(pk=instance.pk).status == target


@pytest.mark.parametrize(
    ("source", "target"),
    [(s, t) for s, t in itertools.product(STATES, STATES) if t not in SPEC_TABLE[s]],
)
def test_forbidden_transition_raises_and_changes_nothing(source, target):
    instance = _instance_in(source)
    before = ContainerInstance.objects.filter(pk=instance.pk).values().get()
    method = getattr(instance, f"mark_{target}", None)
    if method is None:  # nothing may enter "pending": there is no method at all
        assert target == "pending"
        return
    with pytest.raises(TransitionNotAllowed):
        method(**ARGS.get(target, {}))
    assert instance.status == source
    assert ContainerInstance.objects.filter(pk=instance.pk).values().get() == before


def test_status_cannot_be_assigned_directly():
    instance = _instance_in("running")
    with pytest.raises(AttributeError):
        instance.status = "stopped"
