"""What a container may mount (SPEC section 8), checked when saved, requested and run.

A template's volume source is one of two things:

- exactly ``$WORKSPACE_PATH`` (or ``${WORKSPACE_PATH}``): the owner's workspace, which
  gobrave provisions on the engine (a named volume, or a directory under
  ``workspace_root`` on a local engine). Never a path below it: a user's container
  could swap a subdirectory for a symlink between a check and the mount;
- an absolute host path the operator declares, inside ``allowed_volume_roots``, bound on
  a local engine only. It may use gobrave's own variables (``$OWNER_ID``...), never one
  the user chooses (``$INSTANCE_NAME``, ``$USERNAME``), and it is checked again by the
  worker right before each create and start (``check_bind_source``): no symlink on the
  path, a directory or regular file (not a socket or device), still inside the roots.

``/``, ``/proc``, ``/sys``, ``/dev``, ``/run``, ``/var/run``, Docker sockets and
``workspace_root`` itself are refused whatever ``allowed_volume_roots`` says.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat

from django.conf import settings

from containers.models import Runtime

WORKSPACE_SOURCES = frozenset({"$WORKSPACE_PATH", "${WORKSPACE_PATH}"})
# Values the user picks: they may appear in env and command, never in a volume source.
USER_CHOSEN = frozenset({"INSTANCE_NAME", "USERNAME"})
# Variables that name the workspace tree: only the exact $WORKSPACE_PATH source may use it.
WORKSPACE_VARIABLES = frozenset({"WORKSPACE_PATH", "WORKSPACE_ROOT"})
FORBIDDEN_ROOTS = ("/proc", "/sys", "/dev", "/run", "/var/run")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
MAX_PATH = 1024


def variables_in(text: str) -> list[str]:
    """The ``$VAR`` / ``${VAR}`` names in ``text`` (``$$`` escapes are skipped)."""
    names = []
    for match in _VARIABLE.finditer(text.replace("$$", "")):
        names.append(match.group(1) or match.group(2))
    return names


def inside(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root if root == "/" else root + "/")


def forbidden_reason(path: str, *, workspace_root: str | None = None) -> str | None:
    """Why ``path`` (absolute, normalized) may never be a bind source, or None."""
    if path == "/":
        return "the host's root"
    for root in FORBIDDEN_ROOTS:
        if inside(path, root):
            return f"{root} is never mounted"
    if path.endswith(".sock") or posixpath.basename(path) in ("docker.sock", "containerd.sock"):
        return "sockets are never mounted"
    if workspace_root and (inside(path, workspace_root) or inside(workspace_root, path)):
        return "the workspaces are mounted only as $WORKSPACE_PATH"
    return None


def source_problem(source: str) -> str | None:
    """Save-time rules for one volume source (before any expansion), or None when fine."""
    if len(source) > MAX_PATH:
        return f"at most {MAX_PATH} characters"
    if source in WORKSPACE_SOURCES:
        return None
    names = variables_in(source)
    if any(name in WORKSPACE_VARIABLES for name in names):
        return "mount the workspace as exactly $WORKSPACE_PATH, never a path below it"
    chosen = sorted(set(names) & USER_CHOSEN)
    if chosen:
        return f"${chosen[0]} is chosen by the user and may not appear in a volume source"
    if not source.startswith("/"):
        return "must be $WORKSPACE_PATH or an absolute host path"
    return forbidden_reason(posixpath.normpath(source))


def check_bind_source(path: str, *, roots: list[str], workspace_root: str) -> str | None:
    """The worker's check of an operator-declared bind source on its local engine.

    Returns why ``path`` must not be mounted, or None. Runs right before each create and
    start: every component of the path exists and is not a symlink (``lstat`` from the
    top), the source is a directory or a regular file, and it is still inside the
    allowed roots and outside the forbidden paths.
    """
    normalized = posixpath.normpath(path)
    if not path.startswith("/") or normalized != path:
        return "not an absolute, normalized path"
    reason = forbidden_reason(normalized, workspace_root=workspace_root)
    if reason:
        return reason
    if not any(inside(normalized, root) for root in roots):
        return "outside the allowed volume roots"
    return _plain_path(normalized)


def check_workspace_directory(path: str) -> str | None:
    """The worker's check of a directory workspace before each create and start: a real
    directory, no symlink anywhere on its path."""
    return _plain_path(posixpath.normpath(path), directory=True)


def _plain_path(path: str, *, directory: bool = False) -> str | None:
    current = "/"
    for part in path.strip("/").split("/"):
        current = posixpath.join(current, part)
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return f"{current} does not exist"
        except OSError as exc:
            return f"{current}: {exc.strerror}"
        if stat.S_ISLNK(info.st_mode):
            return f"{current} is a symlink"
    mode = info.st_mode
    if directory and not stat.S_ISDIR(mode):
        return "not a directory"
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        return "not a directory or a regular file (a socket, device or pipe)"
    return None


def workspace_for(
    *, runtime: Runtime, owner_id: int, uid: int, gid: int, installation: str
) -> dict:
    """Where the owner's workspace lives on ``runtime`` (nothing is made here)."""
    config = settings.GOBRAVE["container"]
    if runtime.workspace_driver == Runtime.WorkspaceDriver.DIRECTORY:
        source = f"{config['workspace_root'].rstrip('/')}/{owner_id}"
        kind = "directory"
    else:
        source = f"gb-ws-{installation}-{owner_id}"
        kind = "volume"
    return {"kind": kind, "source": source, "uid": uid, "gid": gid}
