"""contract §3's table of outbox moves, pair by pair, for the model and for the relay.

The model's django-fsm transitions and the relay's compare-and-sets (``move_to``, one
UPDATE each) must allow exactly the moves of the contract's table, and no others.
"""

from __future__ import annotations

import itertools
import uuid

import pytest
from django.utils import timezone
from django_fsm import TransitionNotAllowed

from outbox import relay
from outbox.models import TRANSITIONS, OutboxEvent

# The contract's table, written out again on purpose: the code's table is tested
# against this copy, not against itself.
SPEC_TABLE = {
    "pending": {"processing"},
    "processing": {"processing", "sent", "pending", "dead"},
    "sent": set(),
    "dead": set(),
}
STATES = list(SPEC_TABLE)
PAIRS = list(itertools.product(STATES, STATES))

pytestmark = pytest.mark.django_db


def _row(status: str, **fields) -> OutboxEvent:
    return OutboxEvent.objects.create(
        kind="TestProbe",
        queue="probe",
        aggregate_id=str(uuid.uuid4()),
        status=status,
        available_at=timezone.now(),
        **fields,
    )


def _shown(row: OutboxEvent) -> tuple:
    return (row.status, row.attempts, row.outcome, row.claim_token, row.last_error)


def test_the_code_declares_the_contracts_table():
    assert {s: set(t) for s, t in TRANSITIONS.items()} == SPEC_TABLE
    assert {v for v, _ in OutboxEvent._meta.get_field("status").choices} == set(STATES)


def test_the_status_cannot_be_assigned():
    row = _row("pending")
    with pytest.raises(AttributeError):
        row.status = "sent"
    row.refresh_from_db()  # FSMModelMixin lets the protected field refresh
    assert row.status == "pending"


@pytest.mark.parametrize(("source", "target"), PAIRS)
def test_model_transition_follows_the_table(source, target):
    row = _row(source)
    if target in SPEC_TABLE[source]:
        row.transition_method(target)()
        assert row.status == target
    else:
        with pytest.raises(TransitionNotAllowed):
            row.transition_method(target)()
        assert row.status == source


@pytest.mark.parametrize(("source", "target"), PAIRS)
def test_compare_and_set_moves_only_along_the_table(source, target):
    row = _row(source)
    moved = OutboxEvent.objects.filter(id=row.id).move_to(target, last_error="moved")
    row.refresh_from_db()
    if target in SPEC_TABLE[source]:
        assert moved == 1 and (row.status, row.last_error) == (target, "moved"), _shown(row)
    else:
        assert moved == 0 and (row.status, row.last_error) == (source, ""), _shown(row)


@pytest.mark.parametrize("source", STATES)
@pytest.mark.parametrize("target", ["sent", "pending", "dead"])
def test_an_outcome_is_recorded_only_from_processing_under_the_token(source, target):
    """The relay's outcome write (``relay._finish``) for every status a row may be in."""
    token = uuid.uuid4()
    row = _row(source, claim_token=token)
    finished = relay._finish(row.id, token, target, outcome="probe")
    row.refresh_from_db()
    if source == "processing":
        assert finished and row.status == target, _shown(row)
    else:
        assert not finished and (row.status, row.outcome) == (source, ""), _shown(row)
    other = _row(source, claim_token=uuid.uuid4())
    assert not relay._finish(other.id, token, target, outcome="probe")
    other.refresh_from_db()
    assert other.status == source, _shown(other)
