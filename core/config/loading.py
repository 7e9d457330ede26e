"""``load_config``: the file read, the environment's overrides applied, every value
validated, and the keys that depend on each other checked."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from core.config.schema import NESTED, SCHEMA
from core.config.values import ConfigError


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
                key, _, sub = name[len(prefix) :].lower().partition("__")
                if key not in SCHEMA[section] or bool(sub) != ((section, key) in NESTED):
                    shown = f"{section}.{key}" + (f".{sub}" if sub else "")
                    raise ConfigError(f"{name}: unknown key {shown}")
                if sub and sub not in NESTED[(section, key)]:
                    raise ConfigError(f"{name}: unknown key {section}.{key}.{sub}")
                try:
                    value = yaml.safe_load(raw)
                except yaml.YAMLError:
                    value = raw
                if sub:
                    overrides.setdefault(section, {}).setdefault(key, {})[sub] = value
                else:
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
        for key, value in values.items():
            if (section, key) in NESTED:
                given = data.setdefault(section, {}).get(key)
                if given is not None and not isinstance(given, dict):
                    raise ConfigError(f"{path}: {section}.{key} must be a mapping")
                data[section][key] = {**(given or {}), **value}
            else:
                data.setdefault(section, {})[key] = value

    config: dict[str, dict[str, Any]] = {}
    for section, keys in SCHEMA.items():
        config[section] = {}
        given = data.get(section, {})
        for key, (validate, default) in keys.items():
            if key not in given:
                config[section][key] = copy.deepcopy(default)
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
    security = container["security"]
    if security["uid_range_start"] + security["uid_range_size"] > 2**31:
        raise ConfigError(
            "container.security.uid_range_size: uid_range_start + uid_range_size must stay "
            f"below 2^31 ({2**31})"
        )
    if outbox["backoff_cap"] < outbox["backoff_base"]:
        raise ConfigError("outbox.backoff_cap: must not be below outbox.backoff_base")
    if container["stop_timeout"] >= outbox["delivery_timeout"]:
        raise ConfigError(
            "container.stop_timeout: must be shorter than outbox.delivery_timeout, or a stop "
            "of a process that ignores SIGTERM is killed mid-call on every attempt"
        )
    streams = config["streams"]
    if streams["per_user"] > streams["total"]:
        raise ConfigError("streams.per_user: must not be above streams.total")
    if streams["idle_seconds"] > streams["max_seconds"]:
        raise ConfigError("streams.idle_seconds: must not be above streams.max_seconds")
    if (
        streams["stall_seconds"] is not None
        and streams["stall_seconds"] > streams["lease_seconds"] / 2
    ):
        raise ConfigError(
            "streams.stall_seconds: must not be above half of streams.lease_seconds, or a "
            "stream whose client reads nothing would outlive its lease and stop counting"
        )
    lost_after = container["engine_lost_after"]
    if lost_after is not None and lost_after <= container["engine_ping_interval"]:
        raise ConfigError(
            "container.engine_lost_after: must be longer than container.engine_ping_interval,"
            " or one missed ping would end every instance on the engine"
        )
    if container["start_timeout"] <= container["stop_timeout"]:
        raise ConfigError("container.start_timeout: must be longer than container.stop_timeout")
