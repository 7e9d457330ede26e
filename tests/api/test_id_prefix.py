"""The API names an instance by its full uuid or by a unique prefix of at least 8 hex
digits (the short id the admin and the CLI show), looked up only among the instances
the caller may see."""

from __future__ import annotations

import uuid

import pytest

from tests.api.helpers import assert_error

pytestmark = pytest.mark.django_db

ID = uuid.UUID("abcdef12-3456-4789-8abc-def012345678")
TWIN = uuid.UUID("abcdef12-3456-4aaa-8abc-def012345678")  # same first 12 digits


def test_a_unique_prefix_of_eight_hex_digits_names_the_instance(alice, make_instance):
    make_instance("running", id=ID)
    response = alice.get("/api/containers/abcdef12/")
    assert response.status_code == 200, response.content
    assert response.json()["id"] == str(ID)
    response = alice.post("/api/containers/ABCDEF123456/stop/")  # undashed, any case
    assert response.status_code == 202, response.content


def test_a_prefix_that_names_several_of_the_caller_s_instances_is_404(alice, make_instance):
    make_instance("running", id=ID)
    assert alice.get("/api/containers/abcdef12-3456-47/").status_code == 200
    make_instance("running", id=TWIN)
    assert_error(alice.get("/api/containers/abcdef12/"), 404, "not_found")
    assert alice.get("/api/containers/abcdef12-3456-47/").status_code == 200


def test_another_user_s_instance_neither_matches_nor_makes_a_prefix_ambiguous(
    alice, mallory, make_instance, other_user
):
    make_instance("running", id=ID)
    make_instance("running", id=TWIN, owner=other_user)
    assert alice.get("/api/containers/abcdef12/").json()["id"] == str(ID)
    assert mallory.get("/api/containers/abcdef12/").json()["id"] == str(TWIN)
    error = assert_error(mallory.get("/api/containers/abcdef12-3456-47/"), 404, "not_found")
    assert str(ID) not in str(error)
