"""Runtime rows written through the API and the admin: created and changed, checked
first; switching one on or off and changing its capacity are entries in its history.

The admin's form checks the same (``Runtime.clean``, through ``full_clean``): how the row
reaches its engine (``containers.addresses``: unix, tcp with mutual TLS given as file
paths, ssh; plain tcp only to loopback), its name, its driver. Nothing is saved when a
check fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from containers.engines import fake_driver_allowed
from containers.errors import InvalidRuntime, NotFound
from containers.models import ContainerTemplate, Runtime
from containers.queues import Queue
from containers.runtime_history import Kind, runtime_event_record
from containers.runtime_stats import runtime_stats_check
from containers.spec.kubernetes_fit import kubernetes_problems
from containers.spec.resolve import clean_constraints, labels_match
from outbox.services import outbox_release_deferred

# What a caller may set; health, node name and timestamps are gobrave's.
WRITABLE = (
    "name",
    "driver",
    "base_url",
    "tls_ca_cert",
    "tls_client_cert",
    "tls_client_key",
    "kube_namespace",
    "kube_config",
    "kube_context",
    "kube_storage_class",
    "kube_volume_size",
    "kube_access_mode",
    "labels",
    "enabled",
    "max_containers",
    "max_concurrency",
)


def _checked(runtime: Runtime) -> None:
    """``InvalidRuntime`` with every problem by field, or nothing. Reads the TLS files
    (never quoting them), never asks the engine."""
    problems: dict[str, str] = {}
    try:
        runtime.full_clean()
    except ValidationError as exc:
        problems = {field: " ".join(messages) for field, messages in exc.message_dict.items()}
    if runtime.driver == Runtime.Driver.FAKE and not fake_driver_allowed():
        problems["driver"] = "The fake driver is for tests only."

    if problems:
        first = next(iter(problems))
        raise InvalidRuntime(f"{first}: {problems[first]}", fields=problems)


# Settings whose values are secret or point at secrets (TLS material, a kubeconfig):
# the history names them when they change, never their values.
SECRET_SETTINGS = ("tls_ca_cert", "tls_client_cert", "tls_client_key", "kube_config")
# Settings recorded as ``engine.changed``: all but those with entries of their own.
SETTINGS = tuple(f for f in WRITABLE if f not in ("enabled", "max_containers", "max_concurrency"))


def _shown(field: str, value: Any) -> Any:
    return "(set)" if field in SECRET_SETTINGS and value else value


def _templates_unfit_for(runtime: Runtime, config: Mapping[str, Any]) -> list[str]:
    """For a ``kubernetes`` runtime about to be saved: each template that could be placed
    on it (its constraints match the runtime's labels) but asks what Pod Security
    "restricted" forbids, as "name: why" (empty: none, or not a Kubernetes runtime). The
    other half of the check ``template_kubernetes_check`` makes when a template is
    written: adding or relabelling a runtime must not make an old template fail its
    creates in a worker. Reads every template once (a few hundred rows at most)."""
    if runtime.driver != Runtime.Driver.KUBERNETES:
        return []
    unfit = []
    for template in ContainerTemplate.objects.only("name", "constraints", "security", "volumes"):
        if not labels_match(runtime, clean_constraints(template.constraints)):
            continue
        problems = kubernetes_problems(
            security=template.security or {}, volumes=template.volumes or [], config=config
        )
        if problems:
            unfit.append(f"{template.name}: {problems[0]}")
    return unfit


# A change of these may make templates placeable on a Kubernetes runtime.
PLACEMENT_FIELDS = ("driver", "labels", "enabled")


def runtime_fit_problem(runtime: Runtime) -> str:
    """Why ``runtime`` (as it is about to be saved) must not be: it is an enabled
    ``kubernetes`` runtime that templates could be placed on which ask what Pod Security
    "restricted" forbids (``_templates_unfit_for``); '' when none
    does. Their creates would otherwise fail in a worker."""
    if not runtime.enabled:
        return ""
    unfit = _templates_unfit_for(runtime, settings.GOBRAVE["container"]["security"])
    if not unfit:
        return ""
    more = " …" if len(unfit) > 5 else ""
    return (
        f"templates that could be placed here ask what Kubernetes refuses "
        f"({'; '.join(unfit[:5])}{more}): change them, or give this runtime labels they "
        "do not match"
    )


def runtime_enable_problem(runtime: Runtime) -> str:
    """Why ``runtime`` may not be switched on ('' when it may): a decommissioned runtime
    never is (everything it held is forgotten)."""
    if runtime.decommissioned_at is None:
        return ""
    return (
        f"runtime {runtime.name} was decommissioned on "
        f"{runtime.decommissioned_at:%Y-%m-%d %H:%M} UTC: everything it held is "
        "forgotten, so it cannot be switched on again; add the engine as a new runtime"
    )


def _fits(runtime: Runtime) -> None:
    problem = runtime_fit_problem(runtime)
    if problem:
        raise InvalidRuntime(f"labels: {problem}", fields={"labels": problem})


def runtime_create(*, actor: str = "", **fields: Any) -> Runtime:
    """Create a runtime from ``WRITABLE`` fields, checked (``InvalidRuntime`` otherwise).

    One transaction, with the ``engine.added`` entry of its history (driver, address,
    labels and capacity; secret settings named only); not idempotent (a second create
    with the same name is refused).
    Once committed, its engine is asked whether it gives CPU figures
    (``_ask_stats_after_commit``).
    """
    unknown = set(fields) - set(WRITABLE)
    if unknown:
        raise InvalidRuntime(f"unknown runtime fields: {', '.join(sorted(unknown))}")
    runtime = Runtime(**fields)
    _checked(runtime)
    _fits(runtime)
    with transaction.atomic():
        runtime.save()
        shown = {f: _shown(f, getattr(runtime, f)) for f in WRITABLE}
        runtime_event_record(
            runtime=runtime,
            kind=Kind.ADDED,
            actor=actor,
            message=f"{runtime.driver} engine at {runtime.base_url}",
            data=shown,
        )
        outbox_release_deferred(queue=Queue.CREATE)  # a new engine: waiting creates look again
        _ask_stats_after_commit(runtime)
    return runtime


def _ask_stats_after_commit(runtime: Runtime) -> None:
    """Once the row is committed, ask its engine whether it gives CPU figures
    (``runtime_stats_check``: Kubernetes only, bounded; never inside the transaction,
    which holds the row), then give ``runtime`` the answer. In a caller's transaction
    (the admin's), after that one commits."""

    def ask() -> None:
        runtime_stats_check(runtime_id=runtime.pk)
        runtime.refresh_from_db(fields=["serves_stats"])

    transaction.on_commit(ask)


CAPACITY = ("max_containers", "max_concurrency")


def _record_changes(*, runtime: Runtime, before: dict[str, Any], actor: str, reason: str) -> None:
    """The runtime's history entries of a change (inside its transaction): its settings
    (``engine.changed``: the fields named, old and new values in ``data``, a secret
    setting's only as "(set)"), enabled or disabled, and its capacity (old and new
    values in ``data``)."""
    settings = {
        field: {"from": _shown(field, before[field]), "to": _shown(field, getattr(runtime, field))}
        for field in SETTINGS
        if before[field] != getattr(runtime, field)
    }
    if settings:
        runtime_event_record(
            runtime=runtime,
            kind=Kind.CHANGED,
            actor=actor,
            message=f"{', '.join(settings)} changed{': ' if reason else ''}{reason}",
            data=settings,
        )
    if before["enabled"] != runtime.enabled:
        runtime_event_record(
            runtime=runtime,
            kind=Kind.ENABLED if runtime.enabled else Kind.DISABLED,
            actor=actor,
            message=reason,
            from_status="enabled" if before["enabled"] else "disabled",
            to_status="enabled" if runtime.enabled else "disabled",
        )
    changed = {
        field: {"from": before[field], "to": getattr(runtime, field)}
        for field in CAPACITY
        if before[field] != getattr(runtime, field)
    }
    if changed:
        words = ", ".join(
            f"{field} {_limit(values['from'])} → {_limit(values['to'])}"
            for field, values in changed.items()
        )
        runtime_event_record(
            runtime=runtime,
            kind=Kind.CAPACITY,
            actor=actor,
            message=f"{words}{': ' if reason else ''}{reason}",
            data=changed,
        )


def _limit(value: int | None) -> str:
    return "no limit" if value is None else str(value)


def runtime_update(*, runtime_id: int, actor: str, reason: str = "", **fields: Any) -> Runtime:
    """Change the ``WRITABLE`` fields given, checked as a whole row (``InvalidRuntime``:
    nothing changes). Holds the row's lock while it checks and saves, so two changes never
    interleave; idempotent for the same fields. Instances already there stay: a new
    address is how the same engine is reached from now on (each process makes a new
    engine object for it). A decommissioned runtime is never switched on again
    (``InvalidRuntime``). Switching it on or off and changing its capacity are entries
    in the runtime's history (``RuntimeEvent``, with ``actor`` and ``reason``), written
    in the same transaction. Once committed, the engine is asked again whether it gives
    CPU figures (``_ask_stats_after_commit``)."""
    unknown = set(fields) - set(WRITABLE)
    if unknown:
        raise InvalidRuntime(f"unknown runtime fields: {', '.join(sorted(unknown))}")
    with transaction.atomic():
        runtime = Runtime.objects.select_for_update().filter(pk=runtime_id).first()
        if runtime is None:
            raise NotFound(f"no runtime {runtime_id}")
        before = {field: getattr(runtime, field) for field in WRITABLE}
        enabling = fields.get("enabled") and not runtime.enabled
        if enabling and (problem := runtime_enable_problem(runtime)):
            raise InvalidRuntime(f"enabled: {problem}", fields={"enabled": problem})
        for field, value in fields.items():
            setattr(runtime, field, value)
        _checked(runtime)
        if any(before[f] != getattr(runtime, f) for f in PLACEMENT_FIELDS if f in fields):
            _fits(runtime)
        # clean() derives a kubernetes row's base_url and fills its blank defaults.
        derived = {"base_url", "kube_volume_size", "kube_access_mode"}
        runtime.save(update_fields=sorted({*fields, *derived}))
        _record_changes(runtime=runtime, before=before, actor=actor, reason=reason)
        # More room, other labels, enabled again: creates waiting for an engine look again.
        outbox_release_deferred(queue=Queue.CREATE)
        _ask_stats_after_commit(runtime)
    return runtime


def runtime_delete(*, runtime_id: int, actor: str) -> None:
    """Delete the runtime row, with the ``engine.deleted`` entry of its history, in one
    transaction under its row lock. Its instances and DAG runs protect it (Django's
    ``ProtectedError``: decommission a gone engine first). ``NotFound`` for no such
    runtime."""
    with transaction.atomic():
        runtime = Runtime.objects.select_for_update().filter(pk=runtime_id).first()
        if runtime is None:
            raise NotFound(f"no runtime {runtime_id}")
        runtime_event_record(
            runtime=runtime,
            kind=Kind.DELETED,
            actor=actor,
            message=f"{runtime.driver} engine at {runtime.base_url}",
            from_status=runtime.placement_state,
        )
        runtime.delete()
