"""The ready-made groups hold exactly what contract §8 gives them, on a migrated database."""

from __future__ import annotations

import pytest

from tenants.roles import OPERATORS, ROLES, VIEWERS, role_permissions

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("group", [OPERATORS, VIEWERS])
def test_migrated_group_holds_exactly_its_role(group):
    assert role_permissions(group) == ROLES[group]


def test_operators_write_templates_and_operate_but_viewers_only_look():
    assert {"containers.change_containertemplate", "outbox.change_outboxevent"} <= ROLES[OPERATORS]
    assert "containers.change_containerinstance" in ROLES[OPERATORS]
    assert all(name.split(".")[1].startswith("view_") for name in ROLES[VIEWERS])
    assert {p.replace("view_", "", 1) for p in ROLES[VIEWERS]} <= {
        p.split("_", 1)[0].split(".")[0] + "." + p.split("_", 1)[1] for p in ROLES[OPERATORS]
    }
