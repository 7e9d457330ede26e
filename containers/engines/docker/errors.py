"""How the Docker engine's answers become ``EngineError`` (retriable) or
``PermanentEngineError``: HTTP statuses (``_api_error``), every SDK and transport error
(``_translated``), and a start refused for a stale task (``stale_task_of``)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import docker
import docker.errors
import requests.exceptions
import urllib3.exceptions

from containers.engines.base import EngineError, PermanentEngineError

# 4xx statuses a retry can fix: timeout, conflict in flight (e.g. removal in progress),
# rate limit. Every other 4xx is permanent.
_RETRIABLE_4XX = frozenset({408, 409, 429})
# What the engine answers (HTTP 500 on Docker 20.10 / containerd 1.6) when containerd
# still holds a task for a container the daemon does not run: a restart of the daemon
# cut a start of it short. Nothing of the user's runs in that task.
# What the engine answers a start of a container whose task an earlier start left behind
# (a daemon restart cut that start short), with the container's id: the task itself, or
# the task's state directory containerd kept ("failed to start shim: mkdir …/<id>: file
# exists"); either answers every later start of that container the same.
_STALE_TASK = (
    re.compile(r"^task ([0-9a-f]{64}): already exists$"),
    re.compile(r"^failed to start shim: mkdir \S*/([0-9a-f]{64}): file exists(?:: unknown)?$"),
)
# containerd's own words for the same (seen after a daemon restart cut a start short),
# naming no id: the task of the container being started.
_STALE_TASK_OF_REF = re.compile(r"^id already in use$")


def stale_task_of(explanation: str, ref: str = "") -> str | None:
    """The container id a start's refusal names as holding a stale task, else None;
    ``ref`` (the container being started) where the refusal names none."""
    explanation = explanation.strip()
    for pattern in _STALE_TASK:
        if found := pattern.match(explanation):
            return found.group(1)
    if ref and _STALE_TASK_OF_REF.match(explanation):
        return ref
    return None


# Transport-level failures: the daemon is unreachable, slow, or the connection broke.
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    requests.exceptions.RequestException,
    urllib3.exceptions.HTTPError,
    OSError,
)
try:  # ssh:// (docker[ssh]): paramiko's refusals (host key, authentication) too
    import paramiko

    _TRANSPORT_ERRORS += (paramiko.SSHException,)
except ImportError:  # pragma: no cover - paramiko is a dependency
    pass


def _api_error(what: str, exc: docker.errors.APIError) -> EngineError:
    """Classify an engine HTTP error: 5xx and retriable 4xx → retry, other 4xx → permanent."""
    status = exc.status_code
    message = f"{what}: {exc.explanation or exc} (HTTP {status})"
    if status is not None and 400 <= status < 500 and status not in _RETRIABLE_4XX:
        return PermanentEngineError(message)
    return EngineError(message)


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    """Re-raise any docker/requests/socket error as EngineError or PermanentEngineError."""
    try:
        yield
    except EngineError:
        raise
    except docker.errors.APIError as exc:
        raise _api_error(what, exc) from exc
    except (docker.errors.InvalidArgument, docker.errors.InvalidRepository) as exc:
        raise PermanentEngineError(f"{what}: {exc}") from exc
    except (docker.errors.DockerException, *_TRANSPORT_ERRORS) as exc:
        raise EngineError(f"{what}: {exc}") from exc
