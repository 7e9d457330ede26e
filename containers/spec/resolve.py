"""Request-time resolution: a template plus an owner and an instance become a spec.

The worker never re-reads the template; it runs exactly the spec stored on the
instance when the request was accepted. Everything here is pure (no I/O beyond the
objects passed in), so it is unit-tested without a database.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import Any

from containers.engines import driver_class
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE, LABEL_TEMPLATE
from containers.errors import InvalidSpec, MountRefused
from containers.spec import env_policy, mounts
from containers.spec.hardening import clean_security, resolve_hardening
from containers.spec.image_refs import clean_image
from core.config import SECURITY_DEFAULTS

_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# Sizes are bounded before any pattern runs; no pattern has nested or overlapping
# quantifiers, so each runs in time linear in its (bounded) input.
_MEMORY = re.compile(r"(\d{1,15})(?:\.(\d{1,9}))? ?([kmgt]?)(?:i?b)?", re.IGNORECASE)
_MEMORY_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
MIN_MEMORY = 6 * 1024 * 1024  # Docker's own minimum
MAX_MEMORY = 16 * 1024**4
MAX_CPU = 1024
MAX_PIDS = 4_194_304
MAX_VOLUMES = 32


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


# Constraints with this prefix are the cluster's to match (a Kubernetes ``nodeSelector``),
# not runtime labels; only engines that honour them take such a template.
NODE_CONSTRAINT_PREFIX = "node."


def node_selector(constraints: dict[str, str]) -> dict[str, str]:
    """The ``node.`` constraints without their prefix (``node.disktype: ssd`` ->
    ``disktype: ssd``): the engine's node selection."""
    return {
        key.removeprefix(NODE_CONSTRAINT_PREFIX): value
        for key, value in constraints.items()
        if key.startswith(NODE_CONSTRAINT_PREFIX)
    }


def clean_constraints(constraints: Any) -> dict[str, str]:
    if constraints in (None, ""):
        return {}
    if not isinstance(constraints, dict):
        raise InvalidSpec(
            'constraints: must map label names to values such as {"zone": "eu-1"}',
            field="constraints",
        )
    for key, value in constraints.items():
        if not key:
            raise InvalidSpec("constraints: a label name is empty", field="constraints")
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise InvalidSpec(
                f"constraints.{key[:64]}: must be a text or number value", field="constraints"
            )
    return {k: str(v) for k, v in constraints.items()}


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


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


# The variables a request defines (``containers.requests.services._variables``), as ``$NAME``.
VARIABLE_NAMES = frozenset(
    {
        "USERID",
        "GROUPID",
        "OWNER_ID",
        "USERNAME",
        "INSTANCE_ID",
        "INSTANCE_NAME",
        "CONTAINER_NAME",
        "TEMPLATE_ID",
        "TEMPLATE_NAME",
        "RUNTIME_NAME",
        "WORKSPACE_PATH",
        "WORKSPACE_ROOT",
    }
)
# Stands for one variable's value in a bind source: one path segment (``_segment_safe``).
_ONE_SEGMENT = "\x00"


def _segment_may_be(pattern: str, segment: str) -> bool:
    """Whether one path segment with variables (each ``_ONE_SEGMENT``, standing for at
    least one character) can equal ``segment``. Greedy and linear: no regex."""
    parts = pattern.split(_ONE_SEGMENT)
    if len(parts) == 1:
        return pattern == segment
    first, *middle, last = parts
    if not segment.startswith(first):
        return False
    position = len(first)
    for part in middle:
        found = segment.find(part, position + 1)  # a value is never empty
        if found < 0:
            return False
        position = found + len(part)
    return len(segment) - len(last) > position and segment.endswith(last)


def _may_lie_inside(path: str, root: str) -> bool:
    """Whether ``path`` (normalized, its variables one segment each) can lie inside ``root``."""
    segments = [part for part in path.split("/") if part]
    wanted = [part for part in posixpath.normpath(root).split("/") if part]
    return len(segments) >= len(wanted) and all(
        _segment_may_be(pattern, name) for pattern, name in zip(segments, wanted, strict=False)
    )


def check_volume_roots(volumes: list[dict[str, Any]], roots: list[str]) -> None:
    """Refuse, when a template is saved, a bind source no request could place inside
    ``roots`` (``volumes`` as ``clean_volumes`` returns them; the create checks again).

    1. ``$WORKSPACE_PATH`` is the owner's workspace, not a host path: nothing to check.
       (Variables the user chooses and paths never mounted are ``clean_volumes``'s.)
    2. An unknown variable is refused, as a create would refuse it.
    3. Each variable stands for one path segment of at least one character (its value
       may be no more), and the path is normalized.
    4. Refused unless, for some root, every segment of the root can be matched by the
       path's segment in its place: a path without variables is then inside the root;
       ``/srv/data/$OWNER_ID`` can be inside ``/srv/data``, ``/etc/$OWNER_ID`` never.
    """
    allowed = ", ".join(roots) or "none are set (container.allowed_volume_roots)"
    for index, volume in enumerate(volumes):
        source = volume["source"]
        if source in mounts.WORKSPACE_SOURCES:
            continue
        where = f"volumes[{index}].source"
        if not source.startswith("/"):
            raise InvalidSpec(f"{where}: {source!r} is not an absolute path", path=source)
        pattern = expand(
            source, dict.fromkeys(VARIABLE_NAMES, _ONE_SEGMENT), strict=True, where=where
        )
        path = posixpath.normpath(pattern)
        if any(_may_lie_inside(path, root) for root in roots):
            continue
        if _ONE_SEGMENT not in path:
            raise InvalidSpec(
                f"{where}: {path} is outside the allowed volume roots ({allowed}); "
                "use $WORKSPACE_PATH for the owner's workspace",
                path=path,
                allowed=roots,
            )
        raise InvalidSpec(
            f"{where}: {source} is outside the allowed volume roots ({allowed}), "
            "whatever its variables hold",
            path=source,
            allowed=roots,
        )


def _segment_safe(variables: Mapping[str, str]) -> dict[str, str]:
    """The variables an operator's bind source may use: gobrave's own, each only if its
    value is one harmless path segment (no ``/``, not ``.`` or ``..``)."""
    return {
        name: value
        for name, value in variables.items()
        if name not in mounts.USER_CHOSEN | mounts.WORKSPACE_VARIABLES
        and "/" not in value
        and value not in ("", ".", "..")
    }


def resolve_mounts(
    volumes: list[dict[str, Any]],
    variables: Mapping[str, str],
    *,
    roots: list[str],
    workspace: Mapping[str, Any] | None,
    local: bool,
    workspace_root: str,
    template_name: str,
) -> list[dict[str, Any]]:
    """The template's volumes as mounts for this owner on this engine.

    1. ``$WORKSPACE_PATH`` becomes the owner's ``workspace`` (a volume or a directory).
    2. Any other source is an operator's bind: only on a ``local`` engine; expanded
       strictly (unknown variables, and values that would add path segments, refused);
       normalized; inside ``roots``; not a path never mounted (``containers.spec.mounts``).
    A refusal is a ``MountRefused`` whose message names only the template's volume;
    its ``operator_message`` names the path and the rule.
    """
    resolved = []
    for index, volume in enumerate(clean_volumes(volumes)):
        where = f"volumes[{index}]"
        target, read_only = volume["target"], volume["read_only"]
        if volume["source"] in mounts.WORKSPACE_SOURCES:
            if workspace is None:
                raise InvalidSpec(f"{where}: this engine has no workspaces", field=where)
            kind = "volume" if workspace["kind"] == "volume" else "bind"
            resolved.append(
                {
                    "source": workspace["source"],
                    "target": target,
                    "read_only": read_only,
                    "type": kind,
                    "workspace": True,
                }
            )
            continue

        def refuse(
            reason: str, source: str = volume["source"], where: str = where, target: str = target
        ) -> MountRefused:
            return MountRefused(
                f"{where} (target {target}) of template {template_name} was refused",
                operator_message=f"template {template_name} {where}: {source}: {reason}",
                field=where,
                target=target,
                path=source,
            )

        if not local:
            raise refuse("remote engines get volumes only (no host paths)")
        problem = mounts.source_problem(volume["source"])
        if problem:
            raise refuse(problem)
        try:
            source = expand(volume["source"], _segment_safe(variables), strict=True, where=where)
        except InvalidSpec as exc:
            raise refuse(f"{exc.message} (or a value that is not one path segment)") from None
        source = posixpath.normpath(source)
        reason = mounts.forbidden_reason(source, workspace_root=workspace_root)
        if reason is None and not any(mounts.inside(source, root) for root in roots):
            reason = "outside the allowed volume roots"
        if reason:
            raise refuse(reason, source)
        resolved.append(
            {"source": source, "target": target, "read_only": read_only, "type": "bind"}
        )
    return resolved


# Template fields that say nothing about what a container is.
_NOT_SNAPSHOT = frozenset(
    {"created_at", "updated_at", "image_status", "image_checked_at", "user_env_removed"}
)


def user_env_for(template: Any, overrides: Mapping[str, Any] | None) -> dict[str, str]:
    """A user's env ``overrides`` of ``template`` checked against its env policy
    (``env_policy.check_user_env``: its ``user_env`` rules, the keys it sets itself), as
    a create applies it; ``InvalidSpec`` naming the first refused key. The API, the admin's
    add form and ``resolve_spec`` all judge overrides here."""
    return env_policy.check_user_env(
        overrides, rules=template.user_env, template_env=clean_env(template.env)
    )


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
    owner_id: int = 0,
    security: Mapping[str, Any] | None = None,
    workspace: Mapping[str, Any] | None = None,
    local: bool = True,
    workspace_root: str = "",
) -> dict[str, Any]:
    """The stored spec: what the worker hands the engine, fully resolved.

    The user's ``env_overrides`` pass the template's env policy (``containers.spec.env_policy``)
    and are kept literally: variables expand only in the template's own values.
    ``secret_env`` names the env keys whose values users must not see. ``workspace``
    (``kind``, ``source``, ``uid``, ``gid``) is the owner's workspace on the chosen
    engine, kept in the spec when a volume mounts it so the worker provisions it;
    ``security`` is ``container.security`` (its defaults when None).
    """
    operator_env = clean_env(template.env)
    user_env = user_env_for(template, env_overrides)
    # gobrave's variables expand in the operator's values only: a user's value is literal
    # (their "$WORKSPACE_ROOT" must not become the host path the API hides).
    env = {
        **{
            k: expand(v, variables, strict=False, where=f"env.{k}") for k, v in operator_env.items()
        },
        **user_env,
    }
    secret = [k for k in env_policy.clean_secret_env(template.secret_env) if k in env]
    command = clean_command(template.command)
    resources = clean_resources(template.resources)
    if workspace is None:
        workspace = {"kind": "directory", "source": variables.get("WORKSPACE_PATH", "")}
    resolved_mounts = resolve_mounts(
        template.volumes,
        variables,
        roots=roots,
        workspace=workspace,
        local=local,
        workspace_root=workspace_root,
        template_name=template.name,
    )
    hardening = resolve_hardening(
        template_security=getattr(template, "security", {}),
        resources=resources,
        config=SECURITY_DEFAULTS if security is None else security,
        owner_id=owner_id,
        installation=installation,
    )
    return {
        "name": variables["CONTAINER_NAME"],
        "image": clean_image(template.image),
        "pull_policy": template.pull_policy,
        "command": (
            [expand(p, variables, strict=False, where="command") for p in command]
            if command
            else None
        ),
        "env": env,
        "mounts": resolved_mounts,
        **hardening,
        "secret_env": secret,
        "node_selector": node_selector(clean_constraints(getattr(template, "constraints", {}))),
        "workspace": (
            dict(workspace) if any(m.get("workspace") for m in resolved_mounts) else None
        ),
        "labels": {
            LABEL_INSTALLATION: installation,
            LABEL_INSTANCE: variables["INSTANCE_ID"],
            LABEL_TEMPLATE: template.name,
        },
    }


def labels_match(runtime: Any, constraints: Mapping[str, str]) -> bool:
    """The runtime's labels satisfy every constraint (``key: value``). ``node.``
    constraints are the cluster's to match (a nodeSelector), not labels: only a driver
    that honours them takes such a template (a Docker engine cannot)."""
    on_nodes = False
    for key, value in constraints.items():
        if key.startswith(NODE_CONSTRAINT_PREFIX):
            on_nodes = True
        elif str(runtime.labels.get(key)) != value:
            return False
    return not on_nodes or driver_class(runtime.driver).honours_node_constraints
