"""Every domain error of the dags app (the base is ``core.errors.DomainError``).

The API maps each to its HTTP status and stable ``code`` like any other domain error.
"""

from __future__ import annotations

from core.errors import DomainError


class DagInvalid(DomainError):
    """A DAG template that cannot run: a cycle, an unknown key or template, too many
    nodes (HTTP 400). ``details`` names what is wrong."""

    code = "invalid_dag"
    http_status = 400


class NotFound(DomainError):
    """No such DAG template or run, or not one the caller may see or use (HTTP 404)."""

    code = "not_found"
    http_status = 404


class InvalidTransition(DomainError):
    """The run's state does not allow the request: cancel a finished run, retry one that
    did not fail (HTTP 409)."""

    code = "invalid_transition"
    http_status = 409
