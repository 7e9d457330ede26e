"""config.yml: defaults, validation naming the key, environment overrides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.config import SCHEMA, ConfigError, load_config

REPO = Path(__file__).resolve().parent.parent


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "config.yml"
    path.write_text(text)
    return path


def test_shipped_config_yml_matches_the_defaults():
    shipped = load_config(REPO / "config.yml", environ={})
    for section, keys in SCHEMA.items():
        for key, (_check, default) in keys.items():
            if key == "workspace_root":
                assert shipped[section][key] == str(REPO / "var" / "workspaces")
            else:
                assert shipped[section][key] == default, f"{section}.{key}"


def test_missing_file_means_defaults(tmp_path):
    config = load_config(tmp_path / "absent.yml", environ={})
    assert config["container"]["create_queue_max_pending"] == 50
    assert config["container"]["create_queue_max_concurrency"] == 3
    assert config["outbox"]["retention"] == 7 * 86400


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("container:\n  create_queue_max_pending: -1\n", "container.create_queue_max_pending"),
        ("container:\n  create_queue_max_concurrency: 0\n", "create_queue_max_concurrency"),
        ("container:\n  dag_node_cleanup_on_failed: explode\n", "dag_node_cleanup_on_failed"),
        ("container:\n  orphan_policy: keep\n", "container.orphan_policy"),
        ("container:\n  no_such_key: 1\n", "container.no_such_key"),
        ("nosection:\n  a: 1\n", "nosection"),
        ("outbox:\n  delivery_timeout: 10y\n", "outbox.delivery_timeout"),
        ("outbox:\n  delivery_timeout: 999999\n", "outbox.delivery_timeout"),
        ("outbox:\n  max_attempts: true\n", "outbox.max_attempts"),
        ("queue:\n  broker: rabbit://x\n", "queue.broker"),
        ("container:\n  allowed_volume_roots: [relative/path]\n", "allowed_volume_roots"),
        ("container: [1, 2]\n", "container"),
        ("container:\n  stop_timeout: 60\noutbox:\n  delivery_timeout: 60\n", "stop_timeout"),
        ("container: {a: [}\n", "not valid YAML"),
        ("streams:\n  per_user: 0\n", "streams.per_user"),
        ("streams:\n  total: many\n", "streams.total"),
        ("streams:\n  lease_seconds: 1\n", "streams.lease_seconds"),
        ("streams:\n  per_user: 20\n  total: 10\n", "streams.per_user"),
        ("streams:\n  idle_seconds: 2h\n  max_seconds: 1h\n", "streams.idle_seconds"),
        ("streams:\n  lease_seconds: 60\n  stall_seconds: 31\n", "streams.stall_seconds"),
    ],
)
def test_bad_config_is_refused_naming_the_key(tmp_path, text, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(_write(tmp_path, text), environ={})


def test_streams_are_bounded_by_default(tmp_path):
    streams = load_config(tmp_path / "absent.yml", environ={})["streams"]
    assert streams == {
        "per_user": 8,
        "total": 1000,
        "idle_seconds": 300,
        "max_seconds": 3600,
        "lease_seconds": 60,
        "stall_seconds": None,
    }


def test_a_test_overrides_the_streams_section_with_gobrave_config(gobrave_config):
    from django.conf import settings

    shipped = dict(settings.GOBRAVE["streams"])
    gobrave_config(streams={"per_user": 2, "lease_seconds": 3.0})
    assert settings.GOBRAVE["streams"] == {**shipped, "per_user": 2, "lease_seconds": 3.0}


def test_durations_accept_units(tmp_path):
    config = load_config(
        _write(tmp_path, "outbox:\n  poll_interval: 250ms\n  retention: 2h\n"), environ={}
    )
    assert config["outbox"]["poll_interval"] == 0.25
    assert config["outbox"]["retention"] == 7200


def test_environment_overrides_one_key(tmp_path):
    path = _write(tmp_path, "container:\n  create_queue_max_pending: 10\n")
    config = load_config(
        path,
        environ={
            "GOBRAVE_CONTAINER_CREATE_QUEUE_MAX_PENDING": "77",
            "GOBRAVE_QUEUE_BROKER": "redis://127.0.0.1:6379/3",
            "GOBRAVE_CONTAINER_ALLOWED_VOLUME_ROOTS": "[/srv/data]",
        },
    )
    assert config["container"]["create_queue_max_pending"] == 77
    assert config["queue"]["broker"] == "redis://127.0.0.1:6379/3"
    assert config["container"]["allowed_volume_roots"] == ["/srv/data"]


def test_environment_override_is_validated_too(tmp_path):
    with pytest.raises(ConfigError, match="create_queue_max_pending"):
        load_config(
            tmp_path / "x.yml", environ={"GOBRAVE_CONTAINER_CREATE_QUEUE_MAX_PENDING": "-5"}
        )
    with pytest.raises(ConfigError, match="GOBRAVE_OUTBOX_NOPE"):
        load_config(tmp_path / "x.yml", environ={"GOBRAVE_OUTBOX_NOPE": "1"})


def test_a_bad_config_stops_manage_py_with_the_key_named(tmp_path):
    path = _write(tmp_path, "container:\n  create_queue_max_pending: -3\n")
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "GOBRAVE_CONFIG": str(path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "container.create_queue_max_pending" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_nested_security_key_is_overridden_with_a_double_underscore(tmp_path):
    path = _write(tmp_path, "container:\n  security:\n    pids_limit: 200\n    network: none\n")
    config = load_config(path, environ={"GOBRAVE_CONTAINER_SECURITY__PIDS_LIMIT": "64"})
    security = config["container"]["security"]
    assert (security["pids_limit"], security["network"]) == (64, "none")  # the rest stays
    assert security["capabilities"] == SCHEMA["container"]["security"][1]["capabilities"]


@pytest.mark.parametrize(
    ("text", "environ", "named"),
    [
        ("container:\n  security:\n    pid_limit: 5\n", {}, "container.security.pid_limit"),
        ("container:\n  security:\n    pids_limit: 1\n", {}, "container.security.pids_limit"),
        ("container:\n  security:\n    memory: 1x\n", {}, "container.security.memory"),
        ("container:\n  security:\n    network: host\n", {}, "container.security.network"),
        ("container:\n  security:\n    user: root\n", {}, "container.security.user"),
        ("container:\n  security: [1]\n", {}, "container.security"),
        (
            "container:\n  security:\n    capabilities_allowed: [SYS_ADMIN]\n",
            {},
            "container.security.capabilities_allowed",
        ),
        ("", {"GOBRAVE_CONTAINER_SECURITY__NOPE": "1"}, "container.security.nope"),
        ("", {"GOBRAVE_CONTAINER_SECURITY": "{}"}, "container.security"),
        ("", {"GOBRAVE_CONTAINER_SECURITY__CPU": "0"}, "container.security.cpu"),
    ],
)
def test_bad_security_settings_are_refused_naming_the_key(tmp_path, text, environ, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(_write(tmp_path, text), environ=environ)


def test_policies_default_to_off_and_are_overridden_with_a_double_underscore(tmp_path):
    path = _write(tmp_path, "container:\n  policies:\n    max_lifetime: 8h\n")
    config = load_config(path, environ={"GOBRAVE_CONTAINER_POLICIES__INTERVAL": "0.5"})
    policies = config["container"]["policies"]
    assert (policies["max_lifetime"], policies["interval"]) == (8 * 3600, 0.5)
    assert policies["idle_timeout"] is policies["workspace_retention"] is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("container:\n  policies:\n    max_lifetim: 5\n", "container.policies.max_lifetim"),
        ("container:\n  policies:\n    interval: 0\n", "container.policies.interval"),
        ("container:\n  policies:\n    idle_timeout: soon\n", "container.policies.idle_timeout"),
        (
            "container:\n  policies:\n    idle_cpu_threshold: -1\n",
            "container.policies.idle_cpu_threshold",
        ),
        ("container:\n  policies:\n    extendable_by: all\n", "container.policies.extendable_by"),
    ],
)
def test_bad_policy_settings_are_refused_naming_the_key(tmp_path, text, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(_write(tmp_path, text), environ={})


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("container:\n  engine_lost_after: soon\n", "container.engine_lost_after"),
        ("container:\n  engine_lost_after: 0\n", "container.engine_lost_after"),
        ("container:\n  engine_ping_interval: 0\n", "container.engine_ping_interval"),
        ("container:\n  engine_ping_timeout: 2m\n", "container.engine_ping_timeout"),
        (
            "container:\n  engine_ping_interval: 30\n  engine_lost_after: 20\n",
            "container.engine_lost_after: must be longer than container.engine_ping_interval",
        ),
    ],
)
def test_bad_engine_health_settings_are_refused_naming_the_key(tmp_path, text, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(_write(tmp_path, text), environ={})


def test_engine_lost_after_is_never_by_default_and_takes_a_duration(tmp_path):
    assert (
        load_config(tmp_path / "absent.yml", environ={})["container"]["engine_lost_after"] is None
    )
    config = load_config(
        tmp_path / "absent.yml", environ={"GOBRAVE_CONTAINER_ENGINE_LOST_AFTER": "1h"}
    )
    assert config["container"]["engine_lost_after"] == 3600
    emptied = load_config(
        _write(tmp_path, "container:\n  engine_lost_after: 1h\n"),
        environ={"GOBRAVE_CONTAINER_ENGINE_LOST_AFTER": ""},
    )
    assert emptied["container"]["engine_lost_after"] is None
