"""Lifecycle policies of a template, resolved and checked (docs/operations.md, "Policies").

A template's policy fields (``max_lifetime``, ``idle_timeout``, ``idle_cpu_threshold``,
``delete_stopped_after``, ``extendable_by``, ``extend_max``, ``workspace_retention``)
override config.yml's
``container.policies`` one by one: an empty field takes the installation's value, ``0``
turns the rule off for the template. ``policy_resolve`` fixes the result into each new
instance's ``spec["policy"]`` (like the rest of the spec, a later template change does not
touch instances already requested); the transitions arm the instance's deadlines from it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from containers.engines import driver_class
from containers.errors import InvalidSpec
from containers.models import Runtime
from containers.spec.resolve import clean_constraints, labels_match

# The template's policy fields, in the admin form's order.
POLICY_FIELDS = (
    "max_lifetime",
    "idle_timeout",
    "idle_cpu_threshold",
    "delete_stopped_after",
    "extendable_by",
    "extend_max",
    "workspace_retention",
)
# The policy fields that are whole seconds.
DURATIONS = (
    "max_lifetime",
    "idle_timeout",
    "delete_stopped_after",
    "extend_max",
    "workspace_retention",
)
EXTENDERS = ("nobody", "owner", "staff")
_MOST_SECONDS = 366 * 86400 * 10


def _defaults() -> dict[str, Any]:
    return settings.GOBRAVE["container"]["policies"]


def policy_resolve(template: Any) -> dict[str, Any]:
    """The policy an instance of ``template`` lives under (a template row, or a snapshot
    of one): seconds for each rule (None: off), the idle threshold in cores, who may
    extend and by how much at most. Reads no database."""
    defaults = _defaults()

    def pick(name: str) -> Any:
        value = getattr(template, name, None)
        if value is None or value == "":
            return defaults[name]
        return value

    def seconds(name: str) -> float | None:
        value = pick(name)
        return float(value) if value else None  # 0 (or an empty default): off

    return {
        "max_lifetime": seconds("max_lifetime"),
        "idle_timeout": seconds("idle_timeout"),
        "idle_cpu_threshold": float(pick("idle_cpu_threshold")),
        "delete_stopped_after": seconds("delete_stopped_after"),
        "extendable_by": pick("extendable_by"),
        "extend_max": float(pick("extend_max") or 0),
        # The template's own value only (0: keep the workspace), None: config.yml's, read
        # when the pass runs; recorded on the owner's workspace when the instance is
        # deleted (``containers.execution.workspaces.workspace_retention_note``).
        "workspace_retention": _own(template, "workspace_retention"),
    }


def _own(template: Any, name: str) -> int | None:
    value = getattr(template, name, None)
    return None if value is None or value == "" else int(value)


def workspace_retention_of(*, retention: int | None, by_default: bool | None) -> int:
    """Seconds a workspace is kept once unused, 0 for good: the longest of its recorded
    template values (``Workspace.retention``) and, when an instance took it or none is
    recorded (``Workspace.retention_default`` true or null), config.yml's value. The
    policy pass computes the same in SQL (``execution.policies.workspaces_retire``)."""
    values = [] if retention is None else [retention]
    if by_default is not False:
        values.append(int(_defaults()["workspace_retention"] or 0))
    return 0 if not values or 0 in values else max(values)


def runtime_reports_cpu(runtime: Runtime) -> bool | None:
    """Whether the runtime's engine gives CPU figures, from the row alone: its driver's
    ``reports_cpu``, and, for a driver whose engines differ (``cpu_discovered``: a
    Kubernetes cluster serves the metrics API or not), the engine's answer stored on the
    row (``Runtime.serves_stats``; None: not asked yet, ``containers.runtime_stats``)."""
    engine_class = driver_class(runtime.driver)
    if not getattr(engine_class, "reports_cpu", False):
        return False
    if not getattr(engine_class, "cpu_discovered", False):
        return True
    return runtime.serves_stats


def runtimes_without_stats(constraints: Mapping[str, Any]) -> list[tuple[str, bool | None]]:
    """The runtimes the template may be placed on (their labels satisfy its
    ``constraints``; ``node.`` ones are the cluster's) whose engine reports no CPU
    statistics, or has not been asked yet (``runtime_reports_cpu``): ``(name, answer)``."""
    wanted = clean_constraints(constraints)
    found = []
    for runtime in Runtime.objects.filter(decommissioned_at__isnull=True):
        if not labels_match(runtime, wanted):
            continue
        reports = runtime_reports_cpu(runtime)
        if not reports:
            found.append((runtime.name, reports))
    return found


def template_policy_check(cleaned: Mapping[str, Any], current: Any | None) -> None:
    """``InvalidSpec`` naming the field when a policy value is out of range, or when the
    template (as it will be) sets an ``idle_timeout`` and may be placed on a runtime whose
    engine reports no CPU statistics (an idle rule there could never be judged). The API's
    writes and the admin's form both ask it."""

    def value(name: str) -> Any:
        if name in cleaned:
            return cleaned[name]
        return getattr(current, name, None) if current is not None else None

    for name in DURATIONS:
        given = cleaned.get(name)
        if given is None:
            continue
        if isinstance(given, bool) or not isinstance(given, int) or not 0 <= given <= _MOST_SECONDS:
            raise InvalidSpec(
                f"{name}: a whole number of seconds from 0 to {_MOST_SECONDS}, or empty",
                field=name,
            )
    threshold = cleaned.get("idle_cpu_threshold")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 < threshold <= 1024
    ):
        raise InvalidSpec(
            "idle_cpu_threshold: cores, above 0 and at most 1024", field="idle_cpu_threshold"
        )
    extenders = cleaned.get("extendable_by")
    if extenders not in (None, "", *EXTENDERS):
        raise InvalidSpec(
            f"extendable_by: one of {', '.join(EXTENDERS)}, or empty", field="extendable_by"
        )
    idle = value("idle_timeout")
    if idle is None:
        idle = _defaults()["idle_timeout"]
    if idle:
        blind = runtimes_without_stats(value("constraints") or {})
        if blind:
            name, answer = blind[0]
            why = (
                "has not been checked yet for CPU statistics (open its page or save it: "
                "gobrave then asks the cluster for its metrics API)"
                if answer is None
                else "reports no CPU statistics (on Kubernetes: the cluster serves no "
                "metrics API, metrics.k8s.io; install metrics-server, then check the "
                "runtime again)"
            )
            raise InvalidSpec(
                f"idle_timeout: runtime {name} {why}, so idleness cannot be measured there "
                "(constrain the template to other runtimes, or set idle_timeout to 0)",
                field="idle_timeout",
            )


def span(seconds: float) -> str:
    """``90`` → ``1m30s``: how long, in a person's words."""
    seconds = int(round(seconds))
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    if seconds or not parts:
        parts.append(f"{seconds}s")
    return "".join(parts)


def lifetime_reason(policy: Mapping[str, Any], extended_seconds: int) -> str:
    """The max_lifetime rule as the history and the instance's page say it."""
    text = f"max_lifetime: running longer than {span(policy.get('max_lifetime') or 0)}"
    return text + (f" (extended by {span(extended_seconds)})" if extended_seconds else "")


def may_extend(*, policy: Mapping[str, Any], owner_id: int, user: Any) -> bool:
    """Whether ``user`` may push back the time limit of an instance of ``owner_id``
    under ``policy`` (staff always may where anyone may)."""
    who = policy.get("extendable_by") or "nobody"
    if who == "nobody" or user is None:
        return False
    if user.pk == owner_id:
        return who == "owner" or (who == "staff" and getattr(user, "is_staff", False))
    # Another user's instance: staff who may act on instances (not viewers who only look).
    return getattr(user, "is_staff", False) and user.has_perm("containers.change_containerinstance")


@dataclass(frozen=True)
class PolicyStatus:
    """What an instance's page says of its policies: when it will be stopped and why
    (the earliest of its time limit and, if idle from now on, its idle rule), when it
    will be deleted, and whether (and by how much) the viewer may extend it."""

    stop_at: dt.datetime | None
    stop_reason: str
    idle_since: dt.datetime | None
    idle_stop_at: dt.datetime | None
    delete_at: dt.datetime | None
    extendable: bool
    extend_left: int


def policy_status(instance: Any, user: Any) -> PolicyStatus:
    """The instance's ``PolicyStatus`` for ``user``, from its row alone (no query)."""
    policy = (instance.spec or {}).get("policy") or {}
    idle_stop_at = None
    if instance.idle_since is not None and policy.get("idle_timeout"):
        idle_stop_at = instance.idle_since + dt.timedelta(seconds=policy["idle_timeout"])
    reason = ""
    if instance.stop_at is not None:
        reason = lifetime_reason(policy, instance.extended_seconds)
    stop_at = instance.stop_at
    if idle_stop_at is not None and (stop_at is None or idle_stop_at < stop_at):
        stop_at = idle_stop_at
        reason = (
            f"idle_timeout: stopped if it uses less than {policy.get('idle_cpu_threshold')} "
            f"cores for {span(policy['idle_timeout'])}"
        )
    left = max(0, int(float(policy.get("extend_max") or 0)) - instance.extended_seconds)
    extendable = (
        instance.stop_at is not None
        and left > 0
        and may_extend(policy=policy, owner_id=instance.owner_id, user=user)
    )
    return PolicyStatus(
        stop_at=stop_at,
        stop_reason=reason,
        idle_since=instance.idle_since,
        idle_stop_at=idle_stop_at,
        delete_at=instance.delete_at,
        extendable=extendable,
        extend_left=left if instance.stop_at is not None else 0,
    )
