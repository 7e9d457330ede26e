"""``container.security`` (SPEC 8): how every container is locked down; its validators
(sizes, the container's user, capabilities, OCI runtimes), ``SECURITY_SCHEMA`` and its
defaults."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from core.config.values import _boolean, _choice, _integer, _nested, _number

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


_security = _nested(SECURITY_SCHEMA, "container.security")


SECURITY_DEFAULTS = _security({})
