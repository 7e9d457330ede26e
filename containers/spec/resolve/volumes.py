"""A template's volumes against the allowed roots: its bind sources checked when it is
saved (``check_volume_roots``), and made mounts for one owner on one engine at a
request (``resolve_mounts``)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from containers.errors import InvalidSpec, MountRefused
from containers.spec import mounts
from containers.spec.resolve.expansion import expand
from containers.spec.resolve.fields import clean_volumes


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
