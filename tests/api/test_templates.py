"""/api/templates/: read for every user, write for staff, validated like a request."""

from __future__ import annotations

import pytest

from containers.models import ContainerTemplate
from tests.api.helpers import assert_error
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db

VALID = {
    "name": "web",
    "image": "nginx:1.27",
    "command": ["nginx", "-g", "daemon off;"],
    "env": {"PORT": "8080", "OWNER": "$OWNER_ID"},
    "volumes": [{"source": "$WORKSPACE_PATH", "target": "/data", "read_only": False}],
    "resources": {"cpu": 0.5, "memory": "256m"},
    "constraints": {"engine": "fake"},
    "pull_policy": "if_not_present",
}


def test_user_lists_and_reads_templates(alice, template):
    body = alice.get("/api/templates/").json()
    assert [row["name"] for row in body["results"]] == ["sleeper"]
    detail = alice.get(f"/api/templates/{template.pk}/").json()
    assert detail["image"] == template.image
    assert detail["constraints"] == {"engine": "fake"}


@pytest.mark.parametrize("ref", ["999999", "sleeper", "99999999999999999999999"])
def test_unknown_template_is_404(alice, template, ref):
    assert_error(alice.get(f"/api/templates/{ref}/"), 404, "not_found")


def test_staff_creates_a_template_normalized(staff):
    response = staff.post("/api/templates/", VALID, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["resources"] == {"cpu": 0.5, "memory": 256 * 1024**2}
    stored = ContainerTemplate.objects.get(name="web")
    assert stored.env == {"PORT": "8080", "OWNER": "$OWNER_ID"}
    assert stored.volumes[0]["target"] == "/data"


def test_user_cannot_write_templates(alice, template):
    assert_error(alice.post("/api/templates/", VALID, format="json"), 403, "permission_denied")
    assert_error(
        alice.patch(f"/api/templates/{template.pk}/", {"image": "x"}, format="json"),
        403,
        "permission_denied",
    )
    assert_error(alice.delete(f"/api/templates/{template.pk}/"), 403, "permission_denied")
    assert ContainerTemplate.objects.get(pk=template.pk).image == template.image


@pytest.mark.parametrize(
    "field, value",
    [
        ("env", {"1BAD": "x"}),
        ("env", ["A=1"]),
        ("env", {"A": {"nested": True}}),
        ("volumes", "not-a-list"),
        ("volumes", [{"source": "/a", "target": "relative"}]),
        ("volumes", [{"source": "/a", "target": "/b", "extra": 1}]),
        ("resources", {"cpu": -1}),
        ("resources", {"memory": "1k"}),
        ("resources", {"gpus": 1}),
        ("constraints", {"engine": ["fake"]}),
        ("constraints", "engine=fake"),
    ],
)
def test_invalid_json_field_is_400_naming_the_field(staff, field, value):
    response = staff.post("/api/templates/", {**VALID, field: value}, format="json")
    error = assert_error(response, 400, "invalid_spec")
    assert error["details"]["field"].startswith(field)
    assert ContainerTemplate.objects.filter(name="web").count() == 0


@pytest.mark.parametrize(
    "body, field",
    [
        ({"image": "x"}, "name"),
        ({"name": "x"}, "image"),
        ({"name": "x" * 129, "image": "x"}, "name"),
        ({"name": "x", "image": "x", "pull_policy": "sometimes"}, "pull_policy"),
        ({"name": "x", "image": "x", "env": {"A": "\x00"}}, "env"),
    ],
)
def test_invalid_template_input_is_400(staff, body, field):
    error = assert_error(staff.post("/api/templates/", body, format="json"), 400, "invalid")
    assert field in error["details"]


def test_duplicate_name_is_400(staff, template):
    response = staff.post("/api/templates/", {**VALID, "name": "sleeper"}, format="json")
    error = assert_error(response, 400, "invalid_spec")
    assert error["details"]["field"] == "name"


def test_staff_patches_a_template(staff, template):
    response = staff.patch(
        f"/api/templates/{template.pk}/", {"env": {"A": 1}, "image": "busybox:2"}, format="json"
    )
    assert response.status_code == 200, response.content
    template.refresh_from_db()
    assert (template.env, template.image) == ({"A": "1"}, "busybox:2")


def test_staff_sets_a_templates_workspace_retention_and_a_bad_one_changes_nothing(staff, template):
    url = f"/api/templates/{template.pk}/"
    response = staff.patch(url, {"workspace_retention": 86400}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["workspace_retention"] == 86400, response.json()
    error = assert_error(
        staff.patch(url, {"workspace_retention": -1}, format="json"), 400, "invalid"
    )
    assert "workspace_retention" in error["details"], error
    template.refresh_from_db()
    assert template.workspace_retention == 86400


def test_patch_with_invalid_volumes_changes_nothing(staff, template):
    response = staff.patch(
        f"/api/templates/{template.pk}/", {"volumes": [{"source": ""}]}, format="json"
    )
    assert_error(response, 400, "invalid_spec")
    template.refresh_from_db()
    assert template.volumes == []


def test_put_needs_every_required_field(staff, template):
    error = assert_error(
        staff.put(f"/api/templates/{template.pk}/", {"image": "x"}, format="json"), 400
    )
    assert "name" in error["details"]
    response = staff.put(f"/api/templates/{template.pk}/", {**VALID}, format="json")
    assert response.status_code == 200
    assert response.json()["name"] == "web"


def test_put_resets_omitted_fields_to_their_defaults(staff, template):
    response = staff.put(
        f"/api/templates/{template.pk}/", {"name": "bare", "image": "busybox"}, format="json"
    )
    assert response.status_code == 200, response.content
    template.refresh_from_db()
    assert (template.command, template.constraints, template.pull_policy) == (
        [],
        {},
        "if_not_present",
    )


def test_patch_leaves_omitted_fields_alone(staff, template):
    staff.patch(f"/api/templates/{template.pk}/", {"image": "busybox:2"}, format="json")
    template.refresh_from_db()
    assert (template.command, template.pull_policy) == (["sleep", "600"], "never")


def test_staff_deletes_an_unused_template(staff, template):
    assert staff.delete(f"/api/templates/{template.pk}/").status_code == 204
    assert not ContainerTemplate.objects.filter(pk=template.pk).exists()


def test_deleting_a_template_in_use_is_409(staff, template, owner, fake_runtime):
    InstanceFactory(owner=owner, template=template, runtime=fake_runtime)
    assert_error(staff.delete(f"/api/templates/{template.pk}/"), 409, "template_in_use")
    assert ContainerTemplate.objects.filter(pk=template.pk).exists()


def test_staff_saves_an_env_policy_and_a_secret_mark(staff):
    body = {
        **VALID,
        "env": {**VALID["env"], "DB_PASSWORD": "hunter2"},
        "user_env": ["MODE", "APP_*", {"name": "LEVEL", "pattern": "[0-9]+", "max_length": 3}],
        "secret_env": ["DB_PASSWORD"],
    }
    response = staff.post("/api/templates/", body, format="json")
    assert response.status_code == 201, response.content
    stored = ContainerTemplate.objects.get(name="web")
    assert stored.user_env == body["user_env"]
    assert stored.secret_env == ["DB_PASSWORD"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("user_env", ["LD_PRELOAD"]),
        ("user_env", ["LD_*"]),
        ("user_env", [{"name": "A", "pattern": "("}]),
        ("secret_env", ["NOT_IN_ENV"]),
    ],
)
def test_an_invalid_env_policy_is_400_naming_the_field(staff, field, value):
    response = staff.post("/api/templates/", {**VALID, field: value}, format="json")
    error = assert_error(response, 400, "invalid_spec")
    assert error["details"]["field"] == field, error
    assert not ContainerTemplate.objects.filter(name="web").exists()


@pytest.mark.parametrize(
    "rule, says",
    [
        ("*", "user_env[0].name: '*' would let users set any key"),
        ("PYTHON*", "user_env[0].name: PYTHON* would let users set"),
        ("https_proxy", "user_env[0].name: users may never set https_proxy"),
        ("APP*", "user_env[0].name: 'APP*': a prefix must end in '_*'"),
    ],
)
def test_a_user_env_rule_outside_the_allow_list_is_400_with_the_reason_and_changes_nothing(
    staff, template, rule, says
):
    template.user_env = ["MODE"]
    template.save(update_fields=["user_env"])
    response = staff.patch(
        f"/api/templates/{template.pk}/", {"user_env": ["APP_*", rule]}, format="json"
    )
    error = assert_error(response, 400, "invalid_spec")
    assert error["details"]["field"] == "user_env", error
    assert error["message"].replace("[1]", "[0]").startswith(says), error
    template.refresh_from_db()
    assert template.user_env == ["MODE"], template.user_env


def test_writing_user_env_clears_the_note_of_rules_an_upgrade_removed(staff, template):
    note = [{"rule": "*", "reason": "user_env[0].name: '*' would let users set any key"}]
    template.user_env_removed = note
    template.save(update_fields=["user_env_removed"])
    url = f"/api/templates/{template.pk}/"
    assert staff.patch(url, {"enabled": False}, format="json").status_code == 200
    template.refresh_from_db()
    assert template.user_env_removed == note, template.user_env_removed
    assert staff.patch(url, {"user_env": ["APP_*"]}, format="json").status_code == 200
    template.refresh_from_db()
    assert (template.user_env, template.user_env_removed) == (["APP_*"], []), template.__dict__


def test_patching_secret_env_checks_it_against_the_stored_env(staff, template):
    template.env = {"TOKEN": "t"}
    template.save(update_fields=["env"])
    url = f"/api/templates/{template.pk}/"
    assert_error(staff.patch(url, {"secret_env": ["OTHER"]}, format="json"), 400, "invalid_spec")
    assert staff.patch(url, {"secret_env": ["TOKEN"]}, format="json").status_code == 200
    error = assert_error(staff.patch(url, {"env": {"X": "1"}}, format="json"), 400, "invalid_spec")
    assert error["details"]["field"] == "secret_env"
    template.refresh_from_db()
    assert (template.env, template.secret_env) == ({"TOKEN": "t"}, ["TOKEN"])


@pytest.mark.parametrize(
    "source, says",
    [
        ("/etc", "volumes[0].source: /etc is outside the allowed volume roots (/srv)"),
        ("/etc/$OWNER_ID", "/etc/$OWNER_ID is outside the allowed volume roots (/srv), whatever"),
        ("/srv/$NOPE", "volumes[0].source: unknown variable $NOPE"),
    ],
)
def test_a_volume_no_request_could_mount_is_refused_when_saved_and_changes_nothing(
    staff, template, gobrave_config, source, says
):
    gobrave_config(container={"allowed_volume_roots": ["/srv"]})
    response = staff.patch(
        f"/api/templates/{template.pk}/",
        {"volumes": [{"source": source, "target": "/data"}]},
        format="json",
    )
    error = assert_error(response, 400, "invalid_spec")
    assert says in error["message"], error
    template.refresh_from_db()
    assert template.volumes == []
    accepted = staff.patch(
        f"/api/templates/{template.pk}/",
        {"volumes": [{"source": "/srv/data/$OWNER_ID", "target": "/data"}]},
        format="json",
    )
    assert accepted.status_code == 200, accepted.content


def test_the_browsable_api_draws_a_template_s_edit_form_for_an_operator(staff, template):
    from django.contrib.auth.models import Group

    template.allowed_groups.add(Group.objects.create(name="lab"))
    response = staff.get(f"/api/templates/{template.pk}/?format=api")
    assert response.status_code == 200, response.content[-2000:]
    assert "&quot;lab&quot;" in response.content.decode(), (
        "the edit form names the template's groups"
    )
