"""The schema's names serve generated clients: operation ids read as what they do and no
enum is named by a hash (drf-spectacular's ``ENUM_NAME_OVERRIDES``)."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db

METHODS = {"get", "post", "put", "patch", "delete"}


def _operation_ids(schema: dict) -> dict[str, str]:
    return {
        op["operationId"]: f"{method.upper()} {path}"
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def test_an_action_s_operation_id_is_its_path_without_the_method_s_verb(staff):
    ids = _operation_ids(staff.get("/api/schema/?format=json").json())
    for wanted in ("containers_stop", "containers_start", "containers_logs", "containers_events"):
        assert wanted in ids, sorted(ids)
    for wanted in ("dag_runs_cancel", "dag_runs_retry_failed", "outbox_retry"):
        assert wanted in ids, sorted(ids)
    glued = [op for op, where in ids.items() if re.search(r"/\{id\}/\w+/$", where.split()[1])]
    glued = [op for op in glued if op.endswith(("_create", "_retrieve", "_list"))]
    assert glued == [], glued


def test_the_standard_operations_keep_their_verbs(staff):
    ids = _operation_ids(staff.get("/api/schema/?format=json").json())
    for wanted in ("containers_list", "containers_create", "containers_retrieve"):
        assert wanted in ids, sorted(ids)
    assert "containers_destroy" in ids, sorted(ids)


def test_no_component_is_named_by_a_hash(staff):
    components = staff.get("/api/schema/?format=json").json()["components"]["schemas"]
    # drf-spectacular's fallback: the field's name, 3 hex digits capitalised, "Enum".
    hashed = [n for n in components if re.search(r"(?<=[a-z])[0-9A-F][0-9a-f]{2}Enum$", n)]
    assert hashed == [], hashed
