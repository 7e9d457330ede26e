"""The shipped config.yml sets both per-owner quotas: one user cannot fill the shared
create queue, and a second user still gets in when the first has filled his share."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers.models import ContainerInstance
from core.config import load_config
from tests.api.helpers import assert_error, token_client
from tests.factories import UserFactory

SHIPPED = Path(__file__).resolve().parent.parent.parent / "config.yml"
KEYS = ("create_queue_max_pending", "max_pending_per_owner", "max_instances_per_owner")


def test_the_shipped_config_sets_both_quotas_and_an_empty_override_lifts_them():
    container = load_config(SHIPPED, environ={})["container"]
    shipped = {key: container[key] for key in KEYS}
    assert shipped == {
        "create_queue_max_pending": 50,
        "max_pending_per_owner": 10,
        "max_instances_per_owner": 20,
    }, shipped
    lifted = {f"GOBRAVE_CONTAINER_{key.upper()}": "" for key in KEYS[1:]}
    container = load_config(SHIPPED, environ=lifted)["container"]
    assert [container[key] for key in KEYS[1:]] == [None, None], container


@pytest.mark.django_db
def test_with_the_shipped_quotas_a_second_user_gets_in_after_the_first_fills_his_share(
    owner, template, gobrave_config
):
    container = load_config(SHIPPED, environ={})["container"]
    gobrave_config(container={key: container[key] for key in KEYS})
    alice, bob = token_client(owner), token_client(UserFactory(username="bob"))

    def create(client):
        return client.post("/api/containers/", {"template": "sleeper"}, format="json")

    answers = []
    while len(answers) < container["create_queue_max_pending"]:
        answers.append(create(alice))
        if answers[-1].status_code != 202:
            break
    rows = list(ContainerInstance.objects.values_list("owner__username", "status"))
    assert len(answers) == 11, (answers[-1].content, rows)
    assert_error(answers[-1], 429, "owner_quota")
    response = create(bob)
    assert response.status_code == 202, (response.content, rows)
