"""Request-time resolution of a template into a spec (pure; no database)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from containers.errors import InvalidSpec, MountRefused
from containers.spec import clean_template_fields, expand, parse_memory, resolve_spec

VARS = {
    "USERID": "7",
    "OWNER_ID": "7",
    "INSTANCE_ID": "abc",
    "CONTAINER_NAME": "gb-abc",
    "WORKSPACE_PATH": "/srv/ws/7",
}


def _template(**fields):
    base = dict(
        name="t",
        image="img",
        command=[],
        env={},
        user_env=[],
        secret_env=[],
        volumes=[],
        resources={},
        pull_policy="never",
    )
    return SimpleNamespace(**{**base, **fields})


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
        template=_template(
            command="echo $CONTAINER_NAME $$HOME",
            env={"OWNER": "$OWNER_ID", "RAW": "$SHELL_VAR", "N": 5},
            volumes=[
                "$WORKSPACE_PATH:/work",
                {"source": "/srv/shared/$OWNER_ID", "target": "/c", "read_only": True},
            ],
            resources={"cpu": 0.5, "memory": "64m"},
            user_env=["EXTRA"],
        ),
        variables=VARS,
        env_overrides={"EXTRA": "${INSTANCE_ID}"},
        roots=["/srv/shared"],
        installation="inst",
        workspace={"kind": "volume", "source": "gb-ws-inst-7", "uid": 1007, "gid": 1007},
    )
    assert spec["command"] == ["sh", "-c", "echo gb-abc $HOME"]
    assert spec["env"] == {"OWNER": "7", "RAW": "$SHELL_VAR", "N": "5", "EXTRA": "abc"}
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
            template=_template(volumes=[{"source": source, "target": "/x"}]),
            variables=VARS,
            env_overrides=None,
            roots=["/srv/ws"],
            installation="i",
        )


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
            template=_template(volumes=["/srv/shared/$OWNER_ID:/data"]),
            variables={**VARS, "OWNER_ID": value},
            env_overrides=None,
            roots=["/srv/shared"],
            installation="i",
        )
    assert "not one path segment" in refused.value.operator_message


def test_an_env_name_with_a_trailing_newline_is_refused():
    with pytest.raises(InvalidSpec):
        clean_template_fields(env={"FOO\n": "x"})
