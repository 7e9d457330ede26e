"""Every domain error of the containers app (the base is ``core.errors.DomainError``).

The API maps each to its HTTP status and stable ``code``; the admin and the commands show
its message.
"""

from __future__ import annotations

from typing import Any

from core.errors import DomainError


class InvalidTransition(DomainError):
    """The instance's state does not allow the request (HTTP 409)."""

    code = "invalid_transition"
    http_status = 409


class QueueFull(DomainError):
    """maxPending is reached; retry after ``retry_after`` seconds (HTTP 429)."""

    code = "queue_full"
    http_status = 429

    def __init__(self, message: str, *, retry_after: int, **details: Any) -> None:
        super().__init__(message, retry_after=retry_after, **details)
        self.retry_after = retry_after


class OwnerQuotaExceeded(DomainError):
    """The owner's ``max_pending_per_owner`` is reached (HTTP 429, code ``owner_quota``).

    Waiting cures it (their pending creates leave the queue), hence ``retry_after``.
    ``details`` names the ``quota``, its ``limit`` and the owner's ``current`` count.
    """

    code = "owner_quota"
    http_status = 429

    def __init__(self, message: str, *, retry_after: int, **details: Any) -> None:
        super().__init__(message, retry_after=retry_after, **details)
        self.retry_after = retry_after


class InstanceQuotaExceeded(DomainError):
    """The owner's ``max_instances_per_owner`` is reached (HTTP 409, ``quota_exceeded``).

    Only a delete cures it, so there is no ``retry_after``. ``details`` as for
    ``OwnerQuotaExceeded``.
    """

    code = "quota_exceeded"
    http_status = 409


class NameTaken(DomainError):
    """The owner already has an instance of that name (HTTP 409, ``name_taken``).

    An owner's instance names are unique among the instances that exist (one on its way
    out keeps its name until its row is gone). ``details``: ``name``.
    """

    code = "name_taken"
    http_status = 409


class WorkspaceInUse(DomainError):
    """A workspace may go only when its owner has no instances left, and only a volume
    (a directory's files belong to the owner's uid on the host) (HTTP 409,
    ``workspace_in_use``). ``details``: ``owner``, ``instances``."""

    code = "workspace_in_use"
    http_status = 409


class InvalidSpec(DomainError):
    """The template, its variables, volumes or constraints cannot make a container (400)."""

    code = "invalid_spec"
    http_status = 400


class TemplateUnavailable(InvalidSpec):
    """The template is switched off, or not open to the owner (400, ``details.field``).

    The API answers it exactly as a template that does not exist.
    """

    code = "template_unavailable"


class NoMatchingRuntime(InvalidSpec):
    """No enabled runtime satisfies the template's scheduling constraints (400)."""

    code = "no_matching_runtime"


class RuntimesCordoned(DomainError):
    """Every enabled runtime that matches a new DAG run's templates is cordoned (HTTP 409).

    ``details.cordoned`` names them. Only a DAG run's start meets it (it chooses the run's
    engine then: ``placement.choice.runtime_select``, and records it as "no engine"); a
    create is never refused for it: it waits in ``pending`` until an engine has room.
    """

    code = "runtimes_cordoned"
    http_status = 409


class RuntimeNotDecommissioned(DomainError):
    """The runtime still has instances or DAG runs placed on it (HTTP 409): decommission it
    first (``containers.fleet.services.runtime_decommission``)."""

    code = "runtime_in_use"
    http_status = 409


class InvalidRuntime(DomainError):
    """A runtime's fields cannot be saved: how to reach its engine is unsafe or malformed,
    a TLS file is missing, its name is taken (400; ``details.fields``: field → message)."""

    code = "invalid_runtime"
    http_status = 400


class NotFound(DomainError):
    """No such instance (or not visible to the caller) (HTTP 404)."""

    code = "not_found"
    http_status = 404


class TemplateInUse(DomainError):
    """The template still has instances (they keep a protected reference) (HTTP 409)."""

    code = "template_in_use"
    http_status = 409


class EngineUnavailable(DomainError):
    """The instance's container engine did not answer (HTTP 503)."""

    code = "runtime_unavailable"
    http_status = 503


class MountRefused(InvalidSpec):
    """A volume of the template may not be mounted (HTTP 400, ``invalid_spec``).

    ``message`` names only the template's volume (``volumes[0]``, its target): it is what
    a user may read. ``operator_message`` names the host path and the rule it broke; it
    goes to the log, the outbox row's ``last_error``, the admin and, through
    ``containers.spec.redaction``, to API callers who may see the engines (so does
    ``details["path"]``).
    """

    def __init__(self, message: str, *, operator_message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.operator_message = operator_message


class ExtensionRefused(DomainError):
    """A time limit may not be pushed back: the instance has none running, or the asked
    time passes what the template allows (HTTP 409, code ``extension_refused``;
    ``details`` says how much is left)."""

    code = "extension_refused"
    http_status = 409


class ExtensionNotAllowed(DomainError):
    """The caller may not extend this instance's time limit: the template's
    ``extendable_by`` does not include them (HTTP 403, code ``extension_not_allowed``)."""

    code = "extension_not_allowed"
    http_status = 403
