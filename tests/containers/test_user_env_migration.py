"""Migration 0012: templates saved with ``user_env`` rules the allow-list refuses lose them,
and each keeps a note of what was removed and why, for the admin to show."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from containers.models import ContainerTemplate
from tests.factories import TemplateFactory

pytestmark = pytest.mark.django_db

migration = importlib.import_module("containers.migrations.0012_user_env_allow_list")


def _rows() -> dict[str, tuple]:
    return {
        t.name: (t.user_env, t.user_env_removed) for t in ContainerTemplate.objects.order_by("name")
    }


def test_the_migration_removes_refused_rules_and_notes_each_with_its_reason():
    TemplateFactory(name="star", user_env=["*", "APP_*", "MODE"])
    TemplateFactory(name="python", user_env=["PYTHON*", {"name": "LEVEL", "pattern": "[0-9]+"}])
    TemplateFactory(name="pager", user_env=["PAGER", "GIT_*"])
    TemplateFactory(name="fine", user_env=["MODE", "APP_*"])
    TemplateFactory(name="none", user_env=[])

    migration.drop_refused_user_env_rules(apps, None)

    rows = _rows()
    assert {name: row[0] for name, row in rows.items()} == {
        "fine": ["MODE", "APP_*"],
        "none": [],
        "pager": [],
        "python": [{"name": "LEVEL", "pattern": "[0-9]+"}],
        "star": ["APP_*", "MODE"],
    }, rows
    assert rows["fine"][1] == [] and rows["none"][1] == [], rows
    assert [note["rule"] for note in rows["star"][1]] == ["*"], rows
    assert "would let users set any key" in rows["star"][1][0]["reason"], rows
    assert [note["rule"] for note in rows["pager"][1]] == ["PAGER", "GIT_*"], rows
    assert all("start-up" in note["reason"] for note in rows["pager"][1]), rows


def test_running_the_migration_again_changes_nothing_more():
    TemplateFactory(name="star", user_env=["*", "MODE"])
    migration.drop_refused_user_env_rules(apps, None)
    first = _rows()
    migration.drop_refused_user_env_rules(apps, None)
    assert _rows() == first == {"star": (["MODE"], first["star"][1])}, _rows()
