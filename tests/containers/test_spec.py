"""Request-time resolution of a template into a spec (pure; no database)."""

from __future__ import annotations

import pytest

from containers.errors import InvalidSpec, MountRefused
from containers.spec.engine_parts import (
    RUNTIME_NAME_STANDIN,
    WORKSPACE_PATH_STANDIN,
    spec_for_engine,
    spec_replaceable,
    spec_unplaced,
)
from containers.spec.resolve import clean_template_fields, expand, parse_memory, resolve_spec
from tests.factories import spec_template

VARS = {
    "USERID": "7",
    "OWNER_ID": "7",
    "INSTANCE_ID": "abc",
    "CONTAINER_NAME": "gb-abc",
    "WORKSPACE_PATH": "/srv/ws/7",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$USERID", "7"),
        ("${USERID}-x", "7-x"),
        ("a$$b", "a$b"),
        ("$$USERID", "$USERID"),
        ("$HOME/x", "$HOME/x"),
        ("${NOPE}", "${NOPE}"),
        ("$", "$"),
    ],
)
def test_expand_in_env_leaves_unknown_variables(text, expected):
    assert expand(text, VARS, strict=False, where="env") == expected


def test_expand_in_volume_refuses_unknown_variable_by_name():
    with pytest.raises(InvalidSpec, match=r"\$NOPE"):
        expand("/srv/$NOPE", VARS, strict=True, where="volumes[0].source")


def test_resolve_spec_expands_env_command_and_mounts():
    spec = resolve_spec(
        template=spec_template(
            command=["sh", "-c", "echo $CONTAINER_NAME $$HOME"],
            env={"OWNER": "$OWNER_ID", "RAW": "$SHELL_VAR", "N": 5},
            volumes=[
                "$WORKSPACE_PATH:/work",
                {"source": "/srv/shared/$OWNER_ID", "target": "/c", "read_only": True},
            ],
            resources={"cpu": 0.5, "memory": "64m"},
        ),
        variables=VARS,
        env_overrides=None,
        roots=["/srv/shared"],
        installation="inst",
        workspace={"kind": "volume", "source": "gb-ws-inst-7", "uid": 1007, "gid": 1007},
    )
    assert spec["command"] == ["sh", "-c", "echo gb-abc $HOME"]
    assert spec["env"] == {"OWNER": "7", "RAW": "$SHELL_VAR", "N": "5"}
    assert spec["mounts"] == [
        {
            "source": "gb-ws-inst-7",
            "target": "/work",
            "read_only": False,
            "type": "volume",
            "workspace": True,
        },
        {"source": "/srv/shared/7", "target": "/c", "read_only": True, "type": "bind"},
    ]
    assert spec["workspace"] == {
        "kind": "volume",
        "source": "gb-ws-inst-7",
        "uid": 1007,
        "gid": 1007,
    }
    assert spec["memory"] == 64 * 1024 * 1024
    assert spec["labels"] == {
        "io.gobrave.installation": "inst",
        "io.gobrave.instance": "abc",
        "io.gobrave.template": "t",
    }


@pytest.mark.parametrize("source", ["/etc", "/srv/ws/../../etc", "/srv/wsx/7", "relative/path"])
def test_volume_outside_allowed_roots_is_refused_naming_the_volume(source):
    with pytest.raises(InvalidSpec, match="volumes\\[0\\]"):
        resolve_spec(
            template=spec_template(volumes=[{"source": source, "target": "/x"}]),
            variables=VARS,
            env_overrides=None,
            roots=["/srv/ws"],
            installation="i",
        )


def test_user_env_values_are_literal_while_the_operators_values_expand():
    """gobrave's variables (the host path the API hides, among them) expand only in the
    operator's values: a user's ``$WORKSPACE_ROOT`` reaches the container as written."""
    user = {
        "APP_ROOT": "$WORKSPACE_ROOT",
        "APP_OWNER": "${OWNER_ID}",
        "APP_PAIR": "$$INSTANCE_ID",
        "MODE": "$CONTAINER_NAME",
    }
    spec = resolve_spec(
        template=spec_template(
            env={"OWNER": "$OWNER_ID", "ROOT": "${WORKSPACE_ROOT}/x", "MODE": "m"},
            user_env=["APP_*", "MODE"],
        ),
        variables={**VARS, "WORKSPACE_ROOT": "/srv/hidden/workspaces"},
        env_overrides=user,
        roots=[],
        installation="inst",
    )
    assert spec["env"] == {"OWNER": "7", "ROOT": "/srv/hidden/workspaces/x", **user}, spec["env"]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"env": {"1BAD": "x"}}, "env"),
        ({"env": {"A": ["list"]}}, "env.A"),
        ({"env": "A=1"}, "env"),
        ({"command": [1, 2]}, "command"),
        ({"command": {"a": 1}}, "command"),
        ({"volumes": ["nocolon"]}, "volumes[0]"),
        ({"volumes": [{"source": "/a", "target": "rel"}]}, "volumes[0].target"),
        ({"volumes": [{"source": "/a", "target": "/b", "mode": "x"}]}, "volumes[0]"),
        ({"resources": {"cpu": -1}}, "resources.cpu"),
        ({"resources": {"memory": "lots"}}, "resources.memory"),
        ({"resources": {"gpu": 1}}, "resources"),
        ({"constraints": {"a": ["x"]}}, "constraints"),
    ],
)
def test_template_fields_are_validated_naming_the_field(fields, named):
    with pytest.raises(InvalidSpec) as refused:
        clean_template_fields(**fields)
    assert refused.value.message.startswith(named)


@pytest.mark.parametrize(
    ("value", "size"),
    [("64m", 64 << 20), ("1g", 1 << 30), ("512MiB", 512 << 20), (8 << 20, 8 << 20)],
)
def test_parse_memory(value, size):
    assert parse_memory(value) == size


def test_memory_below_six_megabytes_is_refused():
    with pytest.raises(InvalidSpec, match="from 6m to 16t"):
        parse_memory("5m")


@pytest.mark.parametrize("value", ["../7", "..", "a/b", "."])
def test_a_variable_that_would_add_path_segments_is_refused_in_volumes(value):
    with pytest.raises(MountRefused) as refused:
        resolve_spec(
            template=spec_template(volumes=["/srv/shared/$OWNER_ID:/data"]),
            variables={**VARS, "OWNER_ID": value},
            env_overrides=None,
            roots=["/srv/shared"],
            installation="i",
        )
    assert "not one path segment" in refused.value.operator_message


def test_an_env_name_with_a_trailing_newline_is_refused():
    with pytest.raises(InvalidSpec):
        clean_template_fields(env={"FOO\n": "x"})


# -- volume sources checked when the template is saved (check_volume_roots) ------------------

ROOTS = ["/srv/data", "/srv/teams/7"]


@pytest.mark.parametrize(
    "source",
    [
        "$WORKSPACE_PATH",
        "/srv/data",
        "/srv/data/$OWNER_ID",
        "/srv/data/${TEMPLATE_ID}/in",
        "/srv/data/run-$INSTANCE_ID",
        "/srv/teams/$GROUPID",  # a root below the literal part: the create decides
        "/srv/data/$OWNER_ID/..",
        "/srv/$GROUPID/7",  # could be /srv/teams/7
        "/srv/d${OWNER_ID}a/x",  # could be /srv/data/x
    ],
)
def test_a_source_that_can_lie_inside_the_roots_is_saved(source):
    from containers.spec.resolve import check_volume_roots, clean_volumes

    check_volume_roots(clean_volumes([{"source": source, "target": "/w"}]), ROOTS)


@pytest.mark.parametrize(
    "source, says",
    [
        ("/etc/app", "/etc/app is outside the allowed volume roots (/srv/data, /srv/teams/7)"),
        ("/etc/$OWNER_ID", "/etc/$OWNER_ID is outside the allowed volume roots"),
        ("/srv/other-$OWNER_ID/x", "(/srv/data, /srv/teams/7), whatever its variables hold"),
        ("/srv/data$OWNER_ID", "/srv/data$OWNER_ID is outside"),
        ("/srv/data/$OWNER_ID/../../x", "/srv/x is outside the allowed volume roots"),
        ("/srv/data/$NOT_A_VARIABLE", "volumes[0].source: unknown variable $NOT_A_VARIABLE"),
    ],
)
def test_a_source_no_request_could_place_inside_the_roots_is_refused_at_save(source, says):
    from containers.spec.resolve import check_volume_roots, clean_volumes

    with pytest.raises(InvalidSpec) as refused:
        check_volume_roots(clean_volumes([{"source": source, "target": "/w"}]), ROOTS)
    assert says in refused.value.message


def test_a_variable_the_user_sets_is_refused_in_a_source_at_save():
    """contract §8: $INSTANCE_NAME and $USERNAME are the user's; never in a volume source."""
    with pytest.raises(InvalidSpec, match=r"\$INSTANCE_NAME is chosen by the user"):
        clean_template_fields(volumes=[{"source": "/srv/data/$INSTANCE_NAME", "target": "/w"}])


def test_the_save_check_knows_exactly_the_variables_a_request_defines(db, template, owner):
    """A name added to the request's variables must be known to the save-time check."""
    import uuid

    from containers.requests.services import _variables
    from containers.spec.resolve import VARIABLE_NAMES

    defined = _variables(instance_id=uuid.uuid4(), name="n", owner=owner, template=template)
    assert set(defined) == VARIABLE_NAMES


# --- the engine parts of a spec, placed and placed again (issue 27, item 3) -----------------


def _unplaced_spec() -> dict:
    r, w = RUNTIME_NAME_STANDIN, WORKSPACE_PATH_STANDIN
    return {
        "env": {"ON": r, "BOTH": f"{w}/{r}-{r}", "KEY": f"s3cr3t{r}", "PLAIN": "x"},
        "command": ["run", f"--at={w}"],
        "mounts": [{"source": w, "target": "/data", "type": "volume", "workspace": True}],
        "secret_env": ["KEY"],
        "workspace": {"kind": "volume", "source": w, "uid": 1000, "gid": 1000},
        "placement": {"constraints": {"pool": "p"}, "local_only": False, "engine": ""},
    }


def test_a_placed_spec_is_unplaced_exactly_and_keeps_no_secret_text():
    spec = _unplaced_spec()
    directory = {"kind": "directory", "source": "/srv/ws/7", "uid": 1000, "gid": 1000}
    placed = spec_for_engine(spec, runtime_name="a", workspace=directory)
    assert placed["env"]["BOTH"] == "/srv/ws/7/a-a" and placed["env"]["KEY"] == "s3cr3ta"
    assert placed["mounts"][0]["type"] == "bind", placed
    assert "s3cr3t" not in str(placed["placement"]), placed["placement"]
    assert spec_replaceable(placed) and not spec_replaceable(spec)
    assert spec_unplaced(placed) == spec, spec_unplaced(placed)
    volume = {"kind": "volume", "source": "gb-ws-x-7", "uid": 1000, "gid": 1000}
    again = spec_for_engine(spec_unplaced(placed), runtime_name="bb", workspace=volume)
    assert again == spec_for_engine(spec, runtime_name="bb", workspace=volume), again


def test_a_spec_that_cannot_be_unplaced_exactly_is_not():
    volume = {"kind": "volume", "source": "gb-ws-x-7", "uid": 1, "gid": 1}
    placed = spec_for_engine(_unplaced_spec(), runtime_name="a", workspace=volume)
    changed = {**placed, "env": {**placed["env"], "BOTH": "short"}}
    assert spec_unplaced(changed) is None
    legacy = {**placed, "placement": {"engine": "a"}}  # placed before marks were kept
    assert not spec_replaceable(legacy) and spec_unplaced(legacy) is None
