"""How each container is locked down: ``container.security`` plus the template's overrides.

Operators set the defaults in ``config.yml`` (``container.security``) and may override a
few per template (its ``security`` field; only operators write templates). Users set
nothing here. Whatever is configured, a container is never privileged, never shares the
host's network, PID or IPC namespace, and starts with every capability dropped
(``containers.engines.docker`` builds the HostConfig from the resolved fields).

Pure: no I/O, no database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from containers.errors import InvalidSpec
from core.config import capabilities, container_user

TEMPLATE_KEYS = ("user", "cap_add", "read_only_rootfs", "network", "runtime")
NETWORKS = ("bridge", "none", "owner")


def owner_ids(owner_id: int, config: Mapping[str, Any]) -> tuple[int, int]:
    """The owner's uid and gid (the same number) from ``uid_range_start``/``uid_range_size``."""
    if not 0 <= owner_id < config["uid_range_size"]:
        raise InvalidSpec(
            "this account has no container uid (container.security.uid_range_size is too "
            "small); ask an operator",
            field="owner",
        )
    uid = config["uid_range_start"] + owner_id
    return uid, uid


def clean_security(value: Any, *, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A template's ``security`` overrides, validated; with ``config``, also against what
    it allows (capabilities from ``capabilities_allowed``, runtimes from
    ``runtimes_allowed``). Raises ``InvalidSpec`` naming the key."""
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        raise InvalidSpec(
            'security: must be an object such as {"user": "owner", "network": "none"}',
            field="security",
        )
    for key in value:
        if key not in TEMPLATE_KEYS:
            raise InvalidSpec(
                f"security.{str(key)[:64]}: not a key (keys are {', '.join(TEMPLATE_KEYS)})",
                field="security",
            )
    cleaned: dict[str, Any] = {}
    if "user" in value:
        try:
            container_user(value["user"])
        except ValueError as exc:
            raise InvalidSpec(f"security.user: {exc}", field="security.user") from None
        cleaned["user"] = value["user"]
    if "cap_add" in value:
        try:
            cleaned["cap_add"] = capabilities(value["cap_add"])
        except ValueError as exc:
            raise InvalidSpec(f"security.cap_add: {exc}", field="security.cap_add") from None
        if config is not None:
            extra = sorted(set(cleaned["cap_add"]) - set(config["capabilities_allowed"]))
            if extra:
                raise InvalidSpec(
                    f"security.cap_add: {extra[0]} is not in container.security."
                    "capabilities_allowed",
                    field="security.cap_add",
                )
    if "read_only_rootfs" in value:
        if not isinstance(value["read_only_rootfs"], bool):
            raise InvalidSpec("security.read_only_rootfs: must be true or false", field="security")
        cleaned["read_only_rootfs"] = value["read_only_rootfs"]
    if "network" in value:
        if value["network"] not in NETWORKS:
            raise InvalidSpec(
                f"security.network: must be one of {', '.join(NETWORKS)}", field="security"
            )
        cleaned["network"] = value["network"]
    if "runtime" in value:
        runtime = value["runtime"]
        allowed = config["runtimes_allowed"] if config is not None else None
        if not isinstance(runtime, str) or (
            runtime and allowed is not None and runtime not in allowed
        ):
            raise InvalidSpec(
                f"security.runtime: {str(runtime)[:64]!r} is not in "
                "container.security.runtimes_allowed",
                field="security.runtime",
            )
        cleaned["runtime"] = runtime
    return cleaned


def _user(setting: Any, uid: int, gid: int) -> str | None:
    """The ``uid:gid`` a container runs as; None leaves the image's USER."""
    chosen = container_user(setting)
    if chosen == "owner":
        return f"{uid}:{gid}"
    if chosen == "image":
        return None
    if isinstance(chosen, tuple):
        return f"{chosen[0]}:{chosen[1]}"
    return f"{chosen}:{chosen}"  # a bare uid would otherwise run in group root


def resolve_hardening(
    *,
    template_security: Any,
    resources: Mapping[str, Any],
    config: Mapping[str, Any],
    owner_id: int,
    installation: str,
) -> dict[str, Any]:
    """The spec's security fields for one owner's container.

    1. The template's overrides are checked against the configuration of today.
    2. ``user``: the owner's uid:gid, the image's user, or a fixed one; the owner's gid
       is always a supplementary group (the workspace is 2770 in that group).
    3. Capabilities: all dropped, then the configured set plus the template's additions.
    4. pids, memory and CPU: the template's resources, else the configured defaults.
    5. Network: ``bridge``, ``none``, or the owner's own network (``network_owned``:
       the worker creates it before the create).
    """
    overrides = clean_security(template_security, config=config)
    uid, gid = owner_ids(owner_id, config)
    network = overrides.get("network", config["network"])
    read_only = overrides.get("read_only_rootfs", config["read_only_rootfs"])
    return {
        "user": _user(overrides.get("user", config["user"]), uid, gid),
        "group_add": [str(gid)],
        "cap_add": sorted(set(config["capabilities"]) | set(overrides.get("cap_add", []))),
        "no_new_privileges": bool(config["no_new_privileges"]),
        "pids_limit": resources.get("pids") or config["pids_limit"],
        "memory": resources.get("memory") or config["memory"],
        "cpu": resources.get("cpu") or config["cpu"],
        "read_only_rootfs": read_only,
        "tmpfs_size": config["tmpfs_size"] if read_only else None,
        "network": f"gb-net-{installation}-{owner_id}" if network == "owner" else network,
        "network_owned": network == "owner",
        "oci_runtime": overrides.get("runtime", config["runtime"]) or None,
    }
