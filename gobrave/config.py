"""Load and validate ``config.yml`` once, at start.

The file has four sections (``container``, ``outbox``, ``api``, ``queue``). Every key has a
default and a validator; an unknown key or a bad value raises ``ConfigError`` naming
the key, which stops the process before it serves anything. Any key may be
overridden by the environment as ``GOBRAVE_<SECTION>_<KEY>`` (upper case); the value
is read as YAML, so ``true``, ``5`` and ``[a, b]`` mean what they say.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml


class ConfigError(Exception):
    """config.yml (or an override) is invalid; the message names the key."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError("must be true or false")


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be a whole number between {low} and {high}")
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")
        return value

    return check


def _duration(low: float, high: float) -> Callable[[Any], float]:
    """Seconds as a number, or a string such as ``500ms``, ``30s``, ``5m``, ``7d``."""

    def check(value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError("must be a duration such as 30, '30s', '5m' or '7d'")
        if isinstance(value, int | float):
            seconds = float(value)
        elif isinstance(value, str) and (match := _DURATION.match(value)):
            seconds = float(match.group(1)) * _UNITS[match.group(2)]
        else:
            raise ValueError("must be a duration such as 30, '30s', '5m' or '7d'")
        if not low <= seconds <= high:
            raise ValueError(f"must be between {low:g}s and {high:g}s, got {seconds:g}s")
        return seconds

    return check


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return check


def _optional(inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)

    return check


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _label(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", value):
        raise ValueError("must be 1-63 letters, digits, '.', '_' or '-'")
    return value


def _absolute_paths(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise ValueError("must be a list of paths")
    return [str(Path(p)) for p in value]


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$")


def _rate(value: Any) -> str:
    """A DRF throttle rate such as ``1000/minute`` (at least 1 request per period)."""
    if isinstance(value, str) and (match := _RATE.match(value)) and int(match.group(1)) >= 1:
        return f"{int(match.group(1))}/{match.group(2)}"
    raise ValueError(f"must be a rate such as '1000/minute' or empty (off), got {value!r}")


def _token(value: Any) -> str:
    if not isinstance(value, str) or len(value) < 16 or not value.isprintable() or " " in value:
        raise ValueError("must be a string of at least 16 printable characters without spaces")
    return value


def _broker(value: Any) -> str:
    if value == "orm" or (isinstance(value, str) and re.match(r"^rediss?://", value)):
        return value
    raise ValueError(f"must be 'orm' or a redis:// URL, got {value!r}")


SCHEMA: dict[str, dict[str, tuple[Callable[[Any], Any], Any]]] = {
    "container": {
        "refresh_image_status_on_start": (_boolean, True),
        "recover_running_dag_on_start": (_boolean, True),
        "cleanup_dag_node_containers_before_start": (_boolean, True),
        "delete_container_on_node_success": (_boolean, True),
        "dag_node_cleanup_on_failed": (_choice("none", "stop", "delete"), "stop"),
        "dag_node_cleanup_on_dag_finished": (_choice("none", "stop", "delete"), "delete"),
        "create_queue_max_concurrency": (_integer(1, 1000), 3),
        "create_queue_max_pending": (_integer(1, 1_000_000), 50),
        "start_timeout": (_duration(1, 86400), 300.0),
        "stop_timeout": (_duration(0, 3600), 10.0),
        "reconcile_interval": (_duration(1, 86400), 30.0),
        "orphan_policy": (_choice("report", "remove"), "report"),
        "workspace_root": (_text, "var/workspaces"),
        "allowed_volume_roots": (_absolute_paths, []),
        "installation_id": (_optional(_label), None),
        # Tenants (contract §8): per-owner quotas; None is no limit. Overridable per user and
        # per group in the admin (tenants.models).
        "max_pending_per_owner": (_optional(_integer(1, 1_000_000)), None),
        "max_instances_per_owner": (_optional(_integer(1, 1_000_000)), None),
    },
    "outbox": {
        "poll_interval": (_duration(0.01, 60), 1.0),
        "batch_size": (_integer(1, 1000), 16),
        "max_in_flight": (_optional(_integer(1, 10_000)), None),
        "prefetch": (_integer(0, 1000), 0),
        "delivery_timeout": (_duration(1, 3600), 300.0),
        "lease_margin": (_duration(1, 3600), 30.0),
        "liveness_timeout": (_duration(1, 3600), 20.0),
        "handoff_timeout": (_duration(1, 3600), 30.0),
        "write_timeout": (_duration(0.1, 600), 5.0),
        "stop_grace": (_duration(0, 3600), 8.0),
        "max_attempts": (_integer(1, 100), 8),
        "backoff_base": (_duration(0.01, 3600), 1.0),
        "backoff_cap": (_duration(0.01, 86400), 600.0),
        "retention": (_duration(60, 365 * 86400), 7 * 86400.0),
    },
    # Tenants (contract §8): request throttles per user (None: off) and the /metrics token.
    "api": {
        "throttle_create": (_optional(_rate), "1000/minute"),
        "throttle_write": (_optional(_rate), "3000/minute"),
        "metrics_token": (_optional(_token), None),
    },
    "queue": {
        "broker": (_broker, "orm"),
        "create_workers": (_optional(_integer(1, 100)), None),
        "control_workers": (_integer(1, 100), 2),
        "queue_limit": (_integer(1, 1000), 4),
        "bulk": (_integer(1, 100), 1),
        "poll": (_duration(0.01, 10), 0.1),
        "save_limit": (_integer(-1, 100_000), -1),
    },
}


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) if path.exists() else {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return data


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    overrides: dict[str, dict[str, Any]] = {}
    for name, raw in environ.items():
        for section in SCHEMA:
            prefix = f"GOBRAVE_{section.upper()}_"
            if name.startswith(prefix):
                key = name[len(prefix) :].lower()
                if key not in SCHEMA[section]:
                    raise ConfigError(f"{name}: unknown key {section}.{key}")
                try:
                    value = yaml.safe_load(raw)
                except yaml.YAMLError:
                    value = raw
                overrides.setdefault(section, {})[key] = value
    return overrides


def load_config(
    path: Path | str | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Return the validated configuration as ``{section: {key: value}}``.

    1. Read the YAML file (``GOBRAVE_CONFIG`` or ``path``); a missing file means defaults.
    2. Refuse unknown sections and keys, naming them.
    3. Apply ``GOBRAVE_<SECTION>_<KEY>`` overrides.
    4. Validate every value; fill in defaults; check keys that depend on each other.
    """
    environ = os.environ if environ is None else environ
    path = Path(path or environ.get("GOBRAVE_CONFIG") or "config.yml")
    data = _read_file(path)
    for section, values in data.items():
        if section not in SCHEMA:
            raise ConfigError(f"{path}: unknown section {section!r} (known: {', '.join(SCHEMA)})")
        if values is None:
            data[section] = {}
        elif not isinstance(values, dict):
            raise ConfigError(f"{path}: section {section!r} must be a mapping")
        for key in data[section]:
            if key not in SCHEMA[section]:
                raise ConfigError(f"{path}: unknown key {section}.{key}")
    for section, values in _env_overrides(environ).items():
        data.setdefault(section, {}).update(values)

    config: dict[str, dict[str, Any]] = {}
    for section, keys in SCHEMA.items():
        config[section] = {}
        given = data.get(section, {})
        for key, (validate, default) in keys.items():
            if key not in given:
                config[section][key] = default
                continue
            try:
                config[section][key] = validate(given[key])
            except ValueError as exc:
                raise ConfigError(f"{section}.{key}: {exc}") from None
    _check_relations(config, base=path.resolve().parent)
    return config


def _check_relations(config: dict[str, dict[str, Any]], base: Path) -> None:
    container, outbox = config["container"], config["outbox"]
    root = Path(container["workspace_root"])
    container["workspace_root"] = str(root if root.is_absolute() else (base / root).resolve())
    for p in container["allowed_volume_roots"]:
        if not Path(p).is_absolute():
            raise ConfigError(f"container.allowed_volume_roots: {p!r} must be an absolute path")
    if outbox["backoff_cap"] < outbox["backoff_base"]:
        raise ConfigError("outbox.backoff_cap: must not be below outbox.backoff_base")
    if container["stop_timeout"] >= outbox["delivery_timeout"]:
        raise ConfigError(
            "container.stop_timeout: must be shorter than outbox.delivery_timeout, or a stop "
            "of a process that ignores SIGTERM is killed mid-call on every attempt"
        )
    if container["start_timeout"] <= container["stop_timeout"]:
        raise ConfigError("container.start_timeout: must be longer than container.stop_timeout")
