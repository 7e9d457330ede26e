"""Load and validate ``config.yml`` once, at start.

The file has six sections (``container``, ``outbox``, ``api``, ``streams``, ``queue``,
``webhooks``).
Every key has a default and a validator; an unknown key or a bad value raises
``ConfigError`` naming the key, which stops the process before it serves anything.
Any key may be overridden by the environment as ``GOBRAVE_<SECTION>_<KEY>`` (upper
case); the value is read as YAML, so ``true``, ``5`` and ``[a, b]`` mean what they say.
"""

from __future__ import annotations

import copy
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


# --- container.security (SPEC 8): how every container is locked down ------------------------

_SIZE = re.compile(r"^(\d{1,15})([kmgt]?)$")
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_CAPABILITY = re.compile(r"^[A-Z][A-Z_]{1,31}$")
# Capabilities no template may ever get: each one undoes the container boundary.
NEVER_CAPABILITIES = frozenset(
    {
        "ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO", "SYS_PTRACE", "SYS_BOOT", "SYS_TIME",
        "MAC_ADMIN", "MAC_OVERRIDE", "DAC_READ_SEARCH", "NET_ADMIN", "BPF", "PERFMON",
        "SYSLOG", "LINUX_IMMUTABLE", "SYS_RESOURCE", "BLOCK_SUSPEND", "WAKE_ALARM",
        "AUDIT_CONTROL", "AUDIT_READ", "CHECKPOINT_RESTORE", "IPC_OWNER", "LEASE",
        "SYS_NICE", "SYS_PACCT", "SYS_TTY_CONFIG", "IPC_LOCK",
    }
)  # fmt: skip


def _size(low: int) -> Callable[[Any], int]:
    """Bytes as a whole number, or a string such as ``512m`` or ``1g`` (no spaces)."""

    def check(value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError("must be bytes or a size such as '512m'")
        if isinstance(value, int):
            size = value
        elif isinstance(value, str) and len(value) <= 20 and (match := _SIZE.match(value.lower())):
            size = int(match.group(1)) * _SIZE_UNITS[match.group(2)]
        else:
            raise ValueError("must be bytes or a size such as '512m'")
        if not low <= size <= 1024**5:
            raise ValueError(f"must be between {low} bytes and 1p, got {str(value)[:40]!r}")
        return size

    return check


def _number(low: float, high: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a number between {low:g} and {high:g}")
        if not low <= value <= high:
            raise ValueError(f"must be between {low:g} and {high:g}, got {value}")
        return float(value)

    return check


def container_user(value: Any) -> str | int | tuple[int, int]:
    """``owner``, ``image``, a uid, or ``"uid:gid"`` (shared with template validation)."""
    if value in ("owner", "image"):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{1,10}(:\d{1,10})?", value):
        ids = [int(part) for part in value.split(":")]
        if all(i < 2**31 for i in ids):
            return ids[0] if len(ids) == 1 else (ids[0], ids[1])
    raise ValueError("must be owner, image, a uid or 'uid:gid'")


def capabilities(value: Any) -> list[str]:
    """A list of capability names (``NET_RAW``; a ``CAP_`` prefix is dropped)."""
    if not isinstance(value, list) or len(value) > 64:
        raise ValueError("must be a list of capability names such as NET_BIND_SERVICE")
    names = []
    for item in value:
        name = item.upper().removeprefix("CAP_") if isinstance(item, str) else item
        if not isinstance(name, str) or not _CAPABILITY.match(name):
            raise ValueError(f"{item!r} is not a capability name")
        if name in NEVER_CAPABILITIES:
            raise ValueError(f"{name} is never granted: it undoes the container boundary")
        names.append(name)
    return sorted(set(names))


def _runtime_names(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(
        isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", v) for v in value
    ):
        raise ValueError("must be a list of OCI runtime names such as runsc")
    return value


def _runtime_name(value: Any) -> str:
    if value in (None, ""):
        return ""
    return _runtime_names([value])[0]


SECURITY_SCHEMA: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "user": (container_user, "owner"),
    "uid_range_start": (_integer(1000, 2**31 - 2), 1_000_000),
    "uid_range_size": (_integer(1, 2**31 - 1), 1_000_000),
    "no_new_privileges": (_boolean, True),
    "capabilities": (
        capabilities,
        [
            "CHOWN",
            "DAC_OVERRIDE",
            "FOWNER",
            "FSETID",
            "KILL",
            "NET_BIND_SERVICE",
            "SETGID",
            "SETUID",
        ],
    ),  # fmt: skip
    "capabilities_allowed": (
        capabilities,
        ["AUDIT_WRITE", "MKNOD", "NET_RAW", "SETFCAP", "SETPCAP", "SYS_CHROOT"],
    ),
    "pids_limit": (_integer(8, 4_194_304), 1024),
    "memory": (_size(6 * 1024**2), 1024**3),
    "cpu": (_number(0.01, 1024), 1.0),
    "read_only_rootfs": (_boolean, False),
    "tmpfs_size": (_size(1024**2), 64 * 1024**2),
    "network": (_choice("bridge", "none", "owner"), "bridge"),
    "runtime": (_runtime_name, ""),
    "runtimes_allowed": (_runtime_names, []),
}


def _nested(schema: dict[str, tuple[Callable[[Any], Any], Any]], where: str):
    """A mapping validated key by key against ``schema`` (defaults filled in)."""

    def check(value: Any) -> dict[str, Any]:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ValueError("must be a mapping")
        unknown = sorted(set(value) - set(schema))
        if unknown:
            raise ConfigError(f"unknown key {where}.{unknown[0]}")
        result = {}
        for key, (validate, default) in schema.items():
            try:
                result[key] = validate(value[key]) if key in value else default
            except ValueError as exc:
                raise ConfigError(f"{where}.{key}: {exc}") from None
        return result

    return check


_security = _nested(SECURITY_SCHEMA, "container.security")
SECURITY_DEFAULTS = _security({})

# --- container.policies: lifecycle policies (installation-wide defaults of templates' own) ---
_YEAR = 366 * 86400.0
EXTENDERS = ("nobody", "owner", "staff")
POLICY_SCHEMA: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "interval": (_duration(0.1, 3600), 15.0),
    "max_lifetime": (_optional(_duration(1, _YEAR)), None),
    "idle_timeout": (_optional(_duration(1, _YEAR)), None),
    "idle_cpu_threshold": (_number(0.0001, 1024), 0.02),
    "delete_stopped_after": (_optional(_duration(1, _YEAR)), None),
    "workspace_retention": (_optional(_duration(1, 10 * _YEAR)), None),
    "extendable_by": (_choice(*EXTENDERS), "owner"),
    "extend_max": (_duration(0, _YEAR), 86400.0),
    "batch_size": (_integer(1, 100_000), 200),
}
_policies = _nested(POLICY_SCHEMA, "container.policies")
POLICY_DEFAULTS = _policies({})
# Keys whose value is a mapping of their own: overridden as GOBRAVE_<SECTION>_<KEY>__<SUBKEY>.
NESTED = {("container", "security"): SECURITY_SCHEMA, ("container", "policies"): POLICY_SCHEMA}


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
        # A Kubernetes Pod waiting for a node: how long before it fails (None: never).
        "unschedulable_timeout": (_optional(_duration(1, 30 * 86400)), None),
        "stop_timeout": (_duration(0, 3600), 10.0),
        "reconcile_interval": (_duration(1, 86400), 30.0),
        "reconcile_engine_timeout": (_duration(0.1, 3600), 20.0),
        "monitor_appliers": (_integer(1, 64), 4),
        "orphan_policy": (_choice("report", "remove"), "report"),
        # Engine health (contract §9): the monitor pings every engine this often, a ping
        # waits at most engine_ping_timeout (two unanswered in a row: unreachable), and
        # instances on an engine unreachable for
        # longer than engine_lost_after (None, the default: never) end "engine lost".
        "engine_ping_interval": (_duration(0.1, 3600), 5.0),
        "engine_ping_timeout": (_duration(0.1, 60), 5.0),
        "engine_lost_after": (_optional(_duration(1, 365 * 86400)), None),
        # Where a create goes among the engines with room (containers.placement.choice).
        "placement": (_choice("spread", "pack"), "spread"),
        "workspace_root": (_text, "var/workspaces"),
        "allowed_volume_roots": (_absolute_paths, []),
        "installation_id": (_optional(_label), None),
        "security": (_security, SECURITY_DEFAULTS),
        # Lifecycle policies (docs/operations.md, "Policies"): templates override them.
        "policies": (_policies, POLICY_DEFAULTS),
        # Tenants (contract §8): per-owner quotas; None (the key left empty) is no limit.
        # Set by default, as in the shipped config.yml, so that one user cannot fill the
        # queue. Overridable per user and per group in the admin (tenants.models).
        "max_pending_per_owner": (_optional(_integer(1, 1_000_000)), 10),
        "max_instances_per_owner": (_optional(_integer(1, 1_000_000)), 20),
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
    # What gobrave keeps and for how long (core.retention): each purge deletes in batches
    # of batch_size rows, each its own statement and commit, every interval (run by the
    # dispatcher). Ages: None (the key left empty) keeps forever. Sent outbox rows:
    # outbox.retention.
    "retention": {
        "interval": (_duration(1, 86400), 300.0),
        "batch_size": (_integer(1, 100_000), 1000),
        "dead_letters_resolved": (_optional(_duration(60, 10 * 365 * 86400)), 30 * 86400.0),
        "deleted_instance_history": (_optional(_duration(60, 10 * 365 * 86400)), None),
        "engine_history": (_optional(_duration(60, 10 * 365 * 86400)), None),
        "webhook_deliveries": (_optional(_duration(60, 10 * 365 * 86400)), 30 * 86400.0),
    },
    # Tenants (contract §8): request throttles per user (None: off) and the /metrics token.
    "api": {
        "throttle_create": (_optional(_rate), "1000/minute"),
        "throttle_write": (_optional(_rate), "3000/minute"),
        "metrics_token": (_optional(_token), None),
        "tokens_per_user": (_integer(1, 10_000), 50),
    },
    # Streams (log follow, live pages): open at once per user and in all, counted across
    # every web process and host in lease rows (core.leases), and how long one may last.
    "streams": {
        "per_user": (_integer(1, 10_000), 8),
        "total": (_integer(1, 1_000_000), 1000),
        "idle_seconds": (_duration(0.1, 86400), 300.0),
        "max_seconds": (_duration(1, 7 * 86400), 3600.0),
        "lease_seconds": (_duration(3, 3600), 60.0),
        # Empty: a third of lease_seconds (streams.services.stream_stall_seconds).
        "stall_seconds": (_optional(_duration(0.1, 1800)), None),
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
    # Signed webhooks (webhooks app): who may subscribe, which addresses an endpoint may
    # have, how a delivery is bounded, when an endpoint is switched off.
    "webhooks": {
        "users_may_subscribe": (_boolean, False),
        "allow_http": (_boolean, False),
        "allow_private": (_boolean, False),
        "workers": (_integer(1, 100), 2),
        "timeout": (_duration(0.1, 60), 5.0),
        "disable_after": (_integer(1, 1000), 3),
        "rotation_overlap": (_duration(0, 30 * 86400), 86400.0),
        "limit_interval": (_duration(60, 86400), 60.0),
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
