"""Bounded input: absurd sizes, overflowing numbers and malformed image references are 400s
that name the field, checked before any pattern runs; hypothesis finds no 500."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from containers.errors import InvalidSpec
from containers.models import ContainerInstance, ContainerTemplate
from containers.spec.image_refs import clean_image
from containers.spec.resolve import clean_template_fields, parse_memory
from tests.api.helpers import assert_error

pytestmark = pytest.mark.django_db

VALID = {"name": "web", "image": "busybox:1.36", "constraints": {"engine": "fake"}}


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("resources", {"memory": "9" * 400}, "resources.memory"),
        ("resources", {"memory": 10**400}, "resources.memory"),
        ("resources", {"memory": " " * 20_000 + "1g"}, "resources.memory"),
        ("resources", {"memory": "1" + " " * 20_000}, "resources.memory"),
        ("resources", {"memory": "1.5.5g"}, "resources.memory"),
        ("resources", {"memory": "64m" * 1000}, "resources.memory"),
        ("resources", {"cpu": 10**400}, "resources.cpu"),
        ("resources", {"cpu": 0}, "resources.cpu"),
        ("resources", {"cpu": "1"}, "resources.cpu"),
        ("resources", {"pids": 10**20}, "resources.pids"),
        ("resources", {"pids": 0}, "resources.pids"),
        ("resources", {"pids": 1.5}, "resources.pids"),
        ("image", "a" * 256, "image"),
        ("image", "UPPER/case", "image"),
        ("image", "busybox:", "image"),
        ("image", "busybox:-bad", "image"),
        ("image", "a..b", "image"),
        ("image", "busybox@sha256:zz", "image"),
        ("image", "reg:99999/busybox", "image"),
        ("image", "-reg.io/busybox", "image"),
        ("image", "with space", "image"),
        ("image", "a" + "-" * 250 + "!", "image"),
        ("command", ["x"] * 257, "command"),
        ("volumes", ["/a:/b"] * 33, "volumes"),
        ("env", {f"K{i}": "v" for i in range(257)}, "env"),
        ("env", {"K": "v" * 40_000}, "env.K"),
        ("security", {"cap_add": ["SYS_ADMIN"]}, "security.cap_add"),
        ("security", {"user": "1" * 30}, "security.user"),
        ("security", {"privileged": True}, "security"),
    ],
)
def test_absurd_template_values_are_400_naming_the_field(staff, field, value, named):
    response = staff.post("/api/templates/", {**VALID, field: value}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["message"].startswith(named) or named in str(error["details"]), error
    assert not ContainerTemplate.objects.filter(name="web").exists()


@pytest.mark.parametrize(
    ("value", "size"),
    [("1.5g", 3 << 29), ("64M", 64 << 20), ("512 MiB", 512 << 20), ("1gb", 1 << 30)],
)
def test_memory_sizes_still_parse(value, size):
    assert parse_memory(value) == size


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "busybox:1.36",
        "library/busybox:latest",
        "registry.example.com:5000/team/app_x:v1.2-rc",
        "localhost/app",
        "ghcr.io/a/b__c/d-e.f",
        "busybox@sha256:" + "a" * 64,
        "gobrave-test-busybox:latest",
    ],
)
def test_well_formed_image_references_are_accepted(image):
    assert clean_image(image) == image


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)  # the test client cannot send inf
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
SIZES = st.text(alphabet="0123456789.kmgtKMGTiIbB \t-+e", max_size=40)
FIELDS = ("image", "command", "env", "user_env", "secret_env", "volumes", "resources", "security")


@settings(max_examples=300, deadline=None)
@given(
    field=st.sampled_from(FIELDS),
    value=JSON | SIZES | st.fixed_dictionaries({"memory": SIZES | JSON, "cpu": JSON}),
)
def test_template_validation_raises_nothing_but_invalid_spec(field, value):
    try:
        clean_template_fields(**{field: value})
    except InvalidSpec as exc:
        assert exc.message and isinstance(exc.details, dict)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=st.dictionaries(st.sampled_from(FIELDS + ("name", "pull_policy")), JSON, max_size=6))
def test_template_writes_answer_no_500(staff, body):
    response = staff.post("/api/templates/", body, format="json")
    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert_error(response, 400)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    env=st.dictionaries(st.text(max_size=20), JSON | st.text(max_size=100), max_size=5),
    name=st.none() | st.text(max_size=140),
)
def test_create_requests_answer_no_500(alice, template, env, name):
    template.user_env = ["APP_*", {"name": "LEVEL", "pattern": "[0-9]{1,3}"}]
    template.save(update_fields=["user_env"])
    body = {"template": "sleeper", "env": env}
    if name is not None:
        body["name"] = name
    response = alice.post("/api/containers/", body, format="json")
    assert response.status_code in (202, 400), response.content
    if response.status_code == 400:
        assert_error(response, 400)
    ContainerInstance.objects.all().delete()
