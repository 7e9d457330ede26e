"""Request-time resolution: a template plus an owner and an instance become a spec.

The worker never re-reads the template; it runs exactly the spec stored on the
instance when the request was accepted. Everything here is pure (no I/O beyond the
objects passed in), so it is unit-tested without a database.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from containers import env_policy
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE, LABEL_TEMPLATE
from containers.errors import InvalidSpec

_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# Variables whose values are paths by design; every other value must stay one path segment.
PATH_VARIABLES = frozenset({"WORKSPACE_PATH", "WORKSPACE_ROOT"})
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_MEMORY_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
MIN_MEMORY = 4 * 1024 * 1024  # Docker refuses less than 6 MB; 4 MB keeps the error ours


def expand(text: str, variables: Mapping[str, str], *, strict: bool, where: str) -> str:
    """Replace ``$VAR`` and ``${VAR}`` with their values; ``$$`` is a literal ``$``.

    Unknown variables are left as written (for the container's own shell), or refused
    with their name when ``strict``.
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(1):
            return "$"
        name = match.group(2) or match.group(3)
        if name in variables:
            return variables[name]
        if strict:
            raise InvalidSpec(f"{where}: unknown variable ${name}", field=where, variable=name)
        return match.group(0)

    return _VAR.sub(replace, text)


def parse_memory(value: Any, *, where: str = "resources.memory") -> int:
    """Bytes from an int or a string such as ``64m``, ``1g``, ``512MiB``."""
    if isinstance(value, bool):
        raise InvalidSpec(f"{where}: must be bytes or a size such as '256m'", field=where)
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (match := _MEMORY.match(value)):
        size = int(float(match.group(1)) * _MEMORY_UNITS[match.group(2).lower()])
    else:
        raise InvalidSpec(f"{where}: must be bytes or a size such as '256m'", field=where)
    if size < MIN_MEMORY:
        raise InvalidSpec(f"{where}: must be at least 4m, got {value!r}", field=where)
    return size


def clean_command(command: Any) -> list[str] | None:
    if command in (None, "", []):
        return None
    if isinstance(command, str):
        return ["sh", "-c", command]
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        return list(command)
    raise InvalidSpec("command: must be a list of strings or one string", field="command")


def clean_env(env: Any, *, where: str = "env") -> dict[str, str]:
    if env in (None, ""):
        return {}
    if not isinstance(env, dict):
        raise InvalidSpec(f"{where}: must be a mapping of NAME: value", field=where)
    if len(env) > env_policy.MAX_TEMPLATE_KEYS:
        raise InvalidSpec(f"{where}: at most {env_policy.MAX_TEMPLATE_KEYS} keys", field=where)
    cleaned: dict[str, str] = {}
    for name, value in env.items():
        if (
            not isinstance(name, str)
            or len(name) > env_policy.MAX_NAME
            or not env_policy.ENV_NAME.fullmatch(name)
        ):
            shown = name[: env_policy.MAX_NAME] if isinstance(name, str) else name
            raise InvalidSpec(f"{where}: {shown!r} is not a valid variable name", field=where)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InvalidSpec(f"{where}.{name}: must be a string or a number", field=where)
        text = value if isinstance(value, str) else str(value)
        if len(text) > env_policy.MAX_TEMPLATE_VALUE:
            raise InvalidSpec(
                f"{where}.{name}: at most {env_policy.MAX_TEMPLATE_VALUE} characters",
                field=where,
            )
        cleaned[name] = text
    return cleaned


def clean_volumes(volumes: Any) -> list[dict[str, Any]]:
    """``[{"source", "target", "read_only"}]``, also accepting ``"src:dst[:ro]"`` strings."""
    if volumes in (None, ""):
        return []
    if not isinstance(volumes, list):
        raise InvalidSpec("volumes: must be a list", field="volumes")
    cleaned = []
    for index, volume in enumerate(volumes):
        where = f"volumes[{index}]"
        if isinstance(volume, str):
            parts = volume.split(":")
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
                raise InvalidSpec(
                    f"{where}: write 'source:target' or 'source:target:ro'", field=where
                )
            volume = {"source": parts[0], "target": parts[1], "read_only": parts[2:] == ["ro"]}
        if not isinstance(volume, dict) or set(volume) - {"source", "target", "read_only"}:
            raise InvalidSpec(f"{where}: keys are source, target, read_only", field=where)
        source, target = volume.get("source"), volume.get("target")
        if not isinstance(source, str) or not source:
            raise InvalidSpec(f"{where}.source: must be a path", field=where)
        if not isinstance(target, str) or not target.startswith("/"):
            raise InvalidSpec(f"{where}.target: must be an absolute path", field=where)
        read_only = volume.get("read_only", False)
        if not isinstance(read_only, bool):
            raise InvalidSpec(f"{where}.read_only: must be true or false", field=where)
        cleaned.append({"source": source, "target": target, "read_only": read_only})
    return cleaned


def clean_resources(resources: Any) -> dict[str, Any]:
    if resources in (None, ""):
        return {}
    if not isinstance(resources, dict) or set(resources) - {"cpu", "memory"}:
        raise InvalidSpec("resources: keys are cpu and memory", field="resources")
    cleaned: dict[str, Any] = {}
    cpu = resources.get("cpu")
    if cpu is not None:
        if isinstance(cpu, bool) or not isinstance(cpu, int | float) or not 0 < cpu <= 1024:
            raise InvalidSpec("resources.cpu: must be a number of cores above 0", field="resources")
        cleaned["cpu"] = float(cpu)
    if resources.get("memory") is not None:
        cleaned["memory"] = parse_memory(resources["memory"])
    return cleaned


def clean_constraints(constraints: Any) -> dict[str, str]:
    if constraints in (None, ""):
        return {}
    if not isinstance(constraints, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str | int) and not isinstance(v, bool)
        for k, v in constraints.items()
    ):
        raise InvalidSpec("constraints: must map label names to values", field="constraints")
    return {k: str(v) for k, v in constraints.items()}


def clean_template_fields(**fields: Any) -> dict[str, Any]:
    """Validate a template's JSON fields; returns them normalized or raises InvalidSpec.

    ``secret_env`` is checked against ``env`` when both are given.
    """

    def check_command(value: Any) -> Any:
        clean_command(value)
        return value if value not in (None, "") else []

    cleaners = {
        "command": check_command,
        "env": clean_env,
        "volumes": clean_volumes,
        "resources": clean_resources,
        "constraints": clean_constraints,
        "user_env": env_policy.clean_user_env,
        "secret_env": env_policy.clean_secret_env,
    }
    cleaned = {name: cleaners[name](value) for name, value in fields.items() if name in cleaners}
    if "secret_env" in cleaned and "env" in cleaned:
        env_policy.clean_secret_env(cleaned["secret_env"], env=cleaned["env"])
    return cleaned


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def check_literal_volume_roots(volumes: list[dict[str, Any]], roots: list[str]) -> None:
    """Refuse a volume whose source is a literal host path (no variable) outside ``roots``.

    Sources with variables are checked when a request expands them (``resolve_mounts``),
    where the owner's workspace is known.
    """
    for index, volume in enumerate(volumes):
        source = volume["source"]
        if "$" in source:
            continue
        where = f"volumes[{index}]"
        if not source.startswith("/"):
            raise InvalidSpec(f"{where}.source: {source!r} is not an absolute path", path=source)
        path = os.path.normpath(source)
        if not _inside(path, roots):
            allowed = ", ".join(roots) or "none are set (container.allowed_volume_roots)"
            raise InvalidSpec(
                f"{where}.source: {path} is outside the allowed volume roots ({allowed}); "
                "use $WORKSPACE_PATH for the owner's workspace",
                path=path,
                allowed=roots,
            )


def _segment_safe(variables: Mapping[str, str]) -> dict[str, str]:
    """The variables a volume path may use: path variables as they are, and every other
    value only if it is one harmless path segment (no ``/``, not ``.`` or ``..``)."""
    safe = {}
    for name, value in variables.items():
        if name in PATH_VARIABLES or ("/" not in value and value not in (".", "..")):
            safe[name] = value
    return safe


def resolve_mounts(
    volumes: list[dict[str, Any]], variables: Mapping[str, str], roots: list[str]
) -> list[dict[str, Any]]:
    """Expand volume sources strictly and keep them inside the allowed roots.

    1. Expand; an unknown variable, or a value that would add path segments (an
       instance or user name such as ``../7``), refuses the request naming it.
    2. The source must be absolute; it is normalized, and so is its real path where it
       exists here (a symlink planted in a workspace cannot point outside the roots).
    3. Both must lie inside one of ``roots``.
    """
    safe = _segment_safe(variables)
    mounts = []
    for index, volume in enumerate(clean_volumes(volumes)):
        where = f"volumes[{index}]"
        for name in set(variables) - set(safe):
            if re.search(rf"\$(?:{name}\b|\{{{name}\}})", volume["source"]):
                raise InvalidSpec(
                    f"{where}.source: ${name} ({variables[name]!r}) is not a single path segment",
                    field=where,
                    variable=name,
                )
        source = expand(volume["source"], safe, strict=True, where=f"{where}.source")
        target = expand(volume["target"], safe, strict=True, where=f"{where}.target")
        if not source.startswith("/"):
            raise InvalidSpec(f"{where}.source: {source!r} is not an absolute path", path=source)
        source = os.path.normpath(source)
        real = os.path.realpath(source)
        for path in {source, real}:
            if not _inside(path, roots):
                raise InvalidSpec(
                    f"{where}.source: {path} is outside the allowed volume roots",
                    path=path,
                    allowed=roots,
                )
        mounts.append({"source": source, "target": target, "read_only": volume["read_only"]})
    return mounts


# Template fields that say nothing about what a container is.
_NOT_SNAPSHOT = frozenset({"created_at", "updated_at", "image_status", "image_checked_at"})


def template_snapshot(template: Any) -> dict[str, Any]:
    """The fields of a template that a spec is resolved from, as plain JSON.

    Stored by callers that must create from a template as it was (a DAG run), however
    the template is edited later; ``container_create_by_template(snapshot=...)`` takes it
    (fields added to templates later take their defaults there).
    """
    return {
        field.attname: getattr(template, field.attname)
        for field in template._meta.concrete_fields
        if field.attname not in _NOT_SNAPSHOT
    }


def resolve_spec(
    *,
    template: Any,
    variables: Mapping[str, str],
    env_overrides: Mapping[str, Any] | None,
    roots: list[str],
    installation: str,
) -> dict[str, Any]:
    """The stored spec: what the worker hands the engine, fully resolved.

    The user's ``env_overrides`` pass the template's env policy (``containers.env_policy``);
    ``secret_env`` names the env keys whose values users must not see.
    """
    env = clean_env(template.env)
    env.update(env_policy.check_user_env(env_overrides, rules=template.user_env, template_env=env))
    secret = [k for k in env_policy.clean_secret_env(template.secret_env) if k in env]
    command = clean_command(template.command)
    resources = clean_resources(template.resources)
    return {
        "name": variables["CONTAINER_NAME"],
        "image": template.image,
        "pull_policy": template.pull_policy,
        "command": (
            [expand(p, variables, strict=False, where="command") for p in command]
            if command
            else None
        ),
        "env": {k: expand(v, variables, strict=False, where=f"env.{k}") for k, v in env.items()},
        "mounts": resolve_mounts(template.volumes, variables, roots),
        "cpu": resources.get("cpu"),
        "memory": resources.get("memory"),
        "secret_env": secret,
        "labels": {
            LABEL_INSTALLATION: installation,
            LABEL_INSTANCE: variables["INSTANCE_ID"],
            LABEL_TEMPLATE: template.name,
        },
    }
