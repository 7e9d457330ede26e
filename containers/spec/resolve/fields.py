"""A template's fields checked and normalized, each bounded: command, env, volumes,
resources (``parse_memory``), and all of them at once (``clean_template_fields``)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from containers.errors import InvalidSpec
from containers.spec import env_policy, mounts
from containers.spec.hardening import clean_security
from containers.spec.image_refs import clean_image
from containers.spec.resolve.constraints import clean_constraints

# Sizes are bounded before any pattern runs; no pattern has nested or overlapping
# quantifiers, so each runs in time linear in its (bounded) input.
_MEMORY = re.compile(r"(\d{1,15})(?:\.(\d{1,9}))? ?([kmgt]?)(?:i?b)?", re.IGNORECASE)


_MEMORY_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


MIN_MEMORY = 6 * 1024 * 1024  # Docker's own minimum


MAX_MEMORY = 16 * 1024**4


MAX_CPU = 1024


MAX_PIDS = 4_194_304


MAX_VOLUMES = 32


def parse_memory(value: Any, *, where: str = "resources.memory") -> int:
    """Bytes from an int or a string such as ``64m``, ``1g``, ``512MiB``, ``1.5g``.

    The string's length is checked first (at most 32 characters); the arithmetic is on
    integers, so no value overflows.
    """
    wrong = f"{where}: must be bytes or a size such as '256m', from 6m to 16t"
    if isinstance(value, bool):
        raise InvalidSpec(wrong, field=where)
    if isinstance(value, int):
        size = value
    elif (
        isinstance(value, str) and len(value) <= 32 and (match := _MEMORY.fullmatch(value.strip()))
    ):
        whole, fraction, unit = match.groups()
        scale = _MEMORY_UNITS[unit.lower()]
        size = int(whole) * scale
        if fraction:
            size += int(fraction) * scale // 10 ** len(fraction)
    else:
        raise InvalidSpec(wrong, field=where)
    if not MIN_MEMORY <= size <= MAX_MEMORY:
        raise InvalidSpec(wrong, field=where)
    return size


MAX_COMMAND_PARTS = 256


MAX_COMMAND_PART = 32768


_COMMAND_RULE = (
    f"command: must be a list of at most {MAX_COMMAND_PARTS} strings, the words the "
    'container runs (e.g. ["sleep", "600"]); for a shell line give ["sh", "-c", "..."]'
)


def clean_command(command: Any) -> list[str] | None:
    """The command as the list of words the container runs; ``None`` (or ``[]``, ``""``):
    the image's own. Everywhere a command is stored or sent (templates, DAG nodes, specs,
    the API) it is such a list: no shell runs it unless it names one (``["sh", "-c",
    "..."]``). A string is refused here; only a person typing one line
    (``command_from_text``, the admin's text box) may give one."""
    if command in (None, "", []):
        return None
    if (
        isinstance(command, list)
        and len(command) <= MAX_COMMAND_PARTS
        and all(isinstance(part, str) and len(part) <= MAX_COMMAND_PART for part in command)
    ):
        return list(command)
    raise InvalidSpec(_COMMAND_RULE, field="command")


def command_from_text(text: str) -> list[str]:
    """A command typed as one line, split into words as a POSIX shell splits them
    (``shlex``: quotes and backslashes group, nothing else is interpreted: no pipes,
    redirections, ``&&`` or variables of a shell; for those type ``sh -c '...'``).
    ``InvalidSpec`` for an unclosed quote or a command past ``clean_command``'s limits."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InvalidSpec(f"command: {exc} (close the quote)", field="command") from None
    return clean_command(words) or []


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
    """``[{"source", "target", "read_only"}]``, also accepting ``"src:dst[:ro]"`` strings.

    Sources follow ``containers.spec.mounts``: exactly ``$WORKSPACE_PATH``, or an absolute
    host path without user-chosen variables, outside the paths never mounted.
    """
    if volumes in (None, ""):
        return []
    if not isinstance(volumes, list):
        raise InvalidSpec("volumes: must be a list", field="volumes")
    if len(volumes) > MAX_VOLUMES:
        raise InvalidSpec(f"volumes: at most {MAX_VOLUMES}", field="volumes")
    cleaned = []
    for index, volume in enumerate(volumes):
        where = f"volumes[{index}]"
        if isinstance(volume, str):
            if len(volume) > 2 * mounts.MAX_PATH + 4:
                raise InvalidSpec(f"{where}: at most {2 * mounts.MAX_PATH} characters", field=where)
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
        problem = mounts.source_problem(source)
        if problem:
            raise InvalidSpec(f"{where}.source: {source[:200]!r}: {problem}", field=where)
        if (
            not isinstance(target, str)
            or not target.startswith("/")
            or len(target) > mounts.MAX_PATH
            or mounts.variables_in(target)
        ):
            raise InvalidSpec(
                f"{where}.target: must be an absolute path in the container, without variables",
                field=where,
            )
        read_only = volume.get("read_only", False)
        if not isinstance(read_only, bool):
            raise InvalidSpec(f"{where}.read_only: must be true or false", field=where)
        cleaned.append({"source": source, "target": target, "read_only": read_only})
    targets = [v["target"].rstrip("/") or "/" for v in cleaned]
    if len(set(targets)) != len(targets):
        raise InvalidSpec("volumes: two volumes share a target", field="volumes")
    return cleaned


def _whole(value: Any, *, where: str, low: int, high: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSpec(f"{where}: {what} between {low} and {high}", field=where)
    return value


def clean_resources(resources: Any) -> dict[str, Any]:
    """``cpu`` (cores), ``memory`` (bytes or a size) and ``pids`` (processes), each bounded."""
    if resources in (None, ""):
        return {}
    if not isinstance(resources, dict):
        raise InvalidSpec(
            'resources: must be an object such as {"cpu": 0.5, "memory": "256m"}',
            field="resources",
        )
    for key in resources:
        if key not in ("cpu", "memory", "pids"):
            raise InvalidSpec(
                f"resources.{str(key)[:64]}: not a key (keys are cpu, memory and pids)",
                field="resources",
            )
    cleaned: dict[str, Any] = {}
    cpu = resources.get("cpu")
    if cpu is not None:
        if (
            isinstance(cpu, bool)
            or not isinstance(cpu, int | float)
            or not 0.01 <= cpu <= MAX_CPU  # NaN fails both comparisons
        ):
            raise InvalidSpec(
                f"resources.cpu: must be a number of cores from 0.01 to {MAX_CPU}",
                field="resources.cpu",
            )
        cleaned["cpu"] = float(cpu)
    if resources.get("memory") is not None:
        cleaned["memory"] = parse_memory(resources["memory"])
    if resources.get("pids") is not None:
        cleaned["pids"] = _whole(
            resources["pids"], where="resources.pids", low=8, high=MAX_PIDS, what="processes"
        )
    return cleaned


def clean_template_fields(**fields: Any) -> dict[str, Any]:
    """Validate a template's JSON fields; returns them normalized or raises InvalidSpec.

    ``secret_env`` is checked against ``env`` when both are given.
    """

    def check_command(value: Any) -> list[str]:
        return clean_command(value) or []

    cleaners = {
        "image": clean_image,
        "command": check_command,
        "env": clean_env,
        "volumes": clean_volumes,
        "resources": clean_resources,
        "constraints": clean_constraints,
        "user_env": env_policy.clean_user_env,
        "security": clean_security,
        "secret_env": env_policy.clean_secret_env,
    }
    cleaned = {name: cleaners[name](value) for name, value in fields.items() if name in cleaners}
    if "secret_env" in cleaned and "env" in cleaned:
        env_policy.clean_secret_env(cleaned["secret_env"], env=cleaned["env"])
    return cleaned
