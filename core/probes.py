"""The web tier's probes, for Kubernetes, load balancers and operators.

- ``/healthz``: the process answers. Touches nothing else (no database): a database
  outage must not get every web process restarted.
- ``/readyz``: the database answers and every migration this code knows is applied
  (``database_unready``); otherwise 503 with a short JSON reason. A Pod of a new release
  takes no traffic before its migration Job has run.

Both are answered by ``ProbeMiddleware``, first in ``MIDDLEWARE``, before anything else
reads the request: no host check (a kubelet asks by the Pod's IP, which ``ALLOWED_HOSTS``
need not list), no HTTPS redirect (probes speak plain HTTP to the Pod), no session, no
CSRF, no authentication and no throttle (those are DRF's, which never runs). GET and HEAD
only (405 otherwise); never cached. A probe never answers 500: whatever fails is a 503.
"""

from __future__ import annotations

import functools
import logging

from django.db import DatabaseError, ProgrammingError, connection
from django.db.migrations.loader import MigrationLoader
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)

SHOWN = 3  # unapplied migrations named in a reason; the rest are counted


@functools.cache
def _known_migrations() -> tuple[tuple[tuple[str, str], tuple[tuple[str, str], ...]], ...]:
    """Each migration of this code (read from disk once per process) with the ones it
    replaces: a squashed migration counts as applied when all of those are."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    return tuple((key, tuple(migration.replaces)) for key, migration in graph.nodes.items())


def database_unready() -> str | None:
    """Why the database cannot serve this code, or None when it can.

    One ``SELECT`` of the applied migrations (a few hundred short rows), compared with
    the migrations on disk. Runs outside any transaction; never raises.
    """
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT app, name FROM django_migrations")
            applied = set(cursor.fetchall())
    except ProgrammingError:  # no django_migrations table: never migrated
        return "migrations not applied: the database has none"
    except Exception as exc:  # noqa: BLE001 - a probe reports, it never crashes
        log.warning("readiness: the database does not answer: %s", type(exc).__name__)
        if isinstance(exc, DatabaseError):
            connection.close()  # the next probe starts on a fresh connection
        return f"database unavailable ({type(exc).__name__})"
    missing = [
        f"{app}.{name}"
        for (app, name), replaces in _known_migrations()
        if (app, name) not in applied and not (replaces and set(replaces) <= applied)
    ]
    if not missing:
        return None
    shown = ", ".join(sorted(missing)[:SHOWN])
    more = f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else ""
    return f"{len(missing)} migration(s) not applied: {shown}{more}"


def _answer(status: int, body: dict) -> HttpResponse:
    response = JsonResponse(body, status=status)
    response["Cache-Control"] = "no-store"
    return response


def healthz() -> HttpResponse:
    return _answer(200, {"status": "ok"})


def readyz() -> HttpResponse:
    reason = database_unready()
    if reason is None:
        return _answer(200, {"status": "ok"})
    return _answer(503, {"status": "unavailable", "reason": reason})


PROBES = {"/healthz": healthz, "/readyz": readyz}


class ProbeMiddleware:
    """Answers the probe paths before any other middleware; passes everything else on."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info)
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = _answer(405, {"status": "error", "reason": "use GET or HEAD"})
            response["Allow"] = "GET, HEAD"
            return response
        try:
            return probe()
        except Exception as exc:  # noqa: BLE001 - never a 500 from a probe
            log.exception("probe %s failed", request.path_info)
            return _answer(503, {"status": "unavailable", "reason": type(exc).__name__})
