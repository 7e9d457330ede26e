"""Reads of the database: querysets with the joins their callers need, nothing that writes
and no engine call (those are ``containers.engines.calls``). Grouped by subject."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from containers import access
from containers.counters import RequestStat
from containers.errors import NotFound
from containers.models import (
    ContainerEvent,
    ContainerInstance,
    ContainerTemplate,
    OrphanContainer,
    Runtime,
)
from containers.requests.slots import slot_count, slots_by_runtime, slots_on_runtime
from containers.states import ACTIVE_SLOTS, BEING_DELETED, PLACE_FREE, Status
from containers.tallies import instance_counts
from core import prepared
from core.counters import counter_rows, counters_since
from core.ids import SHORT_ID_LENGTH, db_id, uuid_prefix
from outbox.counters import RelayStat
from outbox.models import OutboxEvent, OutboxStatus
from outbox.selectors import outbox_counts
from tenants.selectors import owner_quotas

# --- Shared helpers ------------------------------------------------------------------------------


def _by_name_or_id(name_field: str, id_field: str, ref: object) -> Q:
    """Rows whose ``name_field`` is ``ref``, or whose ``id_field`` is ``ref`` as an id."""
    query = Q(**{name_field: str(ref)})
    key = db_id(ref)
    return query | Q(**{id_field: key}) if key is not None else query


def count_by_status(rows: QuerySet) -> dict[str, int]:
    """``{status: count}`` over ``rows`` in one grouped query."""
    return dict(rows.order_by().values_list("status").annotate(n=Count("id")))


def instances_by_status() -> dict[str, int]:
    """``{status: instances}`` over every instance (``/metrics``), from ``instance_counts``."""
    totals: dict[str, int] = {}
    for (_runtime, status), n in instance_counts().items():
        totals[status] = totals.get(status, 0) + n
    return totals


# --- Instances -----------------------------------------------------------------------------------


def instance_list(*, statuses: Iterable[str] = (), user=None) -> QuerySet[ContainerInstance]:
    """Instances newest first; a ``user`` without ``view_containerinstance`` sees their own."""
    rows = ContainerInstance.objects.select_related("template", "runtime", "owner")
    if statuses:
        rows = rows.filter(status__in=list(statuses))
    if user is not None and not access.sees_all_instances(user):
        rows = rows.filter(owner=user)
    return rows.order_by("-created_at")


def instance_get(*, instance_id: object, user) -> ContainerInstance:
    """One instance the ``user`` may see (staff: any); ``NotFound`` otherwise.

    ``instance_id`` is a uuid or a prefix of one (at least ``SHORT_ID_LENGTH`` hex
    digits, dashes optional) that names exactly one of the instances the user may see;
    a prefix naming several is ``NotFound`` too. Another user's instance is answered
    exactly like a missing one and never makes a prefix ambiguous.
    """
    ref = str(instance_id).strip()
    visible = instance_list(user=user)
    try:
        key = uuid.UUID(ref)
    except ValueError:
        prefix = uuid_prefix(ref)
        matches = [] if prefix is None else list(visible.filter(id__startswith=prefix)[:2])
        if len(matches) != 1:
            if matches:
                message = f"{ref!r} matches several container instances; give more of the id"
            else:
                message = f"no container instance {ref}"
            raise NotFound(message, id=ref) from None
        return matches[0]
    instance = visible.filter(id=key).first()
    if instance is None:
        raise NotFound(f"no container instance {key}", id=str(key))
    return instance


def instance_resolve(*, ref: str) -> ContainerInstance:
    """The one instance ``ref`` names, for operators' commands; ``NotFound`` otherwise.

    ``ref`` is a uuid, a prefix of one (at least 8 hex digits, the short id the admin
    shows), or an instance name. A prefix or name that matches several
    instances is refused with the candidates named.
    """
    ref = str(ref).strip()
    try:
        exact = uuid.UUID(ref)
    except ValueError:
        exact = None
    rows = ContainerInstance.objects.select_related("template", "runtime", "owner")
    if exact is not None:
        found = rows.filter(id=exact).first()
        if found is None:
            raise NotFound(f"no container instance {exact}", id=str(exact))
        return found
    query = Q(name=ref)
    prefix = uuid_prefix(ref)
    if prefix is not None:
        query |= Q(id__startswith=prefix)
    matches = list(rows.filter(query).order_by("-created_at")[:6])
    if not matches:
        raise NotFound(f"no container instance matches {ref!r}", id=ref)
    if len(matches) > 1:
        names = ", ".join(f"{str(m.id)[:SHORT_ID_LENGTH]} ({m.name})" for m in matches[:5])
        more = " and more" if len(matches) > 5 else ""
        raise NotFound(
            f"{ref!r} matches several instances: {names}{more}; give more of the id",
            id=ref,
        )
    return matches[0]


@dataclass(frozen=True)
class InstanceStatus:
    status: str
    reason: str
    exit_code: int | None


def instance_status(*, instance_id: uuid.UUID) -> InstanceStatus | None:
    """Where the instance is now, read afresh; ``None`` once its row is gone."""
    row = (
        ContainerInstance.objects.filter(id=instance_id)
        .values_list("status", "status_reason", "exit_code")
        .first()
    )
    return InstanceStatus(*row) if row else None


# --- History -------------------------------------------------------------------------------------


def instance_events(*, instance: ContainerInstance) -> QuerySet:
    """The instance's history, newest first."""
    return ContainerEvent.objects.filter(instance_id=instance.id).order_by("-created_at", "-id")


def instance_history_after(*, instance_id: uuid.UUID, after_id: int = 0) -> QuerySet:
    """History rows of an instance (even a deleted one) newer than ``after_id``, oldest first."""
    return ContainerEvent.objects.filter(instance_id=instance_id, id__gt=after_id).order_by("id")


def instance_history_last_id(*, instance_id: uuid.UUID) -> int:
    """The id of the instance's newest history row (0 when it has none)."""
    last = (
        ContainerEvent.objects.filter(instance_id=instance_id)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    return last or 0


def failure_list(*, limit: int = 10) -> QuerySet:
    """The latest failures: instances moved to ``failed`` and dead-lettered requests."""
    return ContainerEvent.objects.filter(Q(to_status="failed") | Q(kind="dead_letter")).order_by(
        "-created_at", "-id"
    )[:limit]


# --- Templates -----------------------------------------------------------------------------------


def _usable_by_ref(*, name: str, user_id: int, key: int | None = None) -> QuerySet:
    """Templates named ``name`` (or with id ``key``) that the user ``user_id`` may use."""
    by_ref = Q(name=name) | Q(pk=key) if key is not None else Q(name=name)
    user = get_user_model()(pk=user_id, is_superuser=False)
    return ContainerTemplate.objects.filter(by_ref, access.usable_templates_q(user)).order_by("pk")


def template_get(*, ref: str | int, user=None) -> ContainerTemplate:
    """A template by id or by name that ``user`` may use (any, without a user).

    ``NotFound`` for anything else, with the same message whether the template is
    missing, switched off or not open to the user (never a DB error).
    """
    key = db_id(ref)
    if user is not None and user.is_authenticated and not user.is_superuser:
        # Every create through the API reads its template so: compiled once, prepared.
        values = {"name": str(ref), "user_id": user.pk, **({"key": key} if key is not None else {})}
        template = prepared.first(("template_get", key is not None), _usable_by_ref, **values)
    else:
        rows = ContainerTemplate.objects.filter(_by_name_or_id("name", "pk", ref))
        if user is not None:
            rows = rows.filter(access.usable_templates_q(user))
        template = rows.order_by("pk").first()
    if template is None:
        raise NotFound(f"no template {str(ref)!r} that you may use", template=str(ref))
    return access.mark_usable(template, user) if user is not None else template


def template_list(*, user=None) -> QuerySet[ContainerTemplate]:
    """Templates by name: all of them for ``view_containertemplate``, else the usable ones."""
    rows = ContainerTemplate.objects.prefetch_related("allowed_groups").order_by("name")
    if user is not None and not access.sees_all_templates(user):
        rows = rows.filter(access.usable_templates_q(user))
    return rows


def template_by_id(*, template_id: object, user=None) -> ContainerTemplate:
    """A template by its id only (detail URLs) that ``user`` may see; ``NotFound`` otherwise."""
    key = db_id(template_id)
    template = template_list(user=user).filter(pk=key).first() if key is not None else None
    if template is None:
        raise NotFound(f"no template {template_id}", template=str(template_id))
    return template


# --- Runtimes and orphans ------------------------------------------------------------------------


def runtime_list() -> QuerySet:
    return Runtime.objects.order_by("name")


def runtime_list_with_load() -> QuerySet:
    """The runtimes, each annotated with ``instance_count`` (instances placed there, as
    ``max_containers`` counts them: every state but pending and being deleted) and
    ``slot_count`` (create/start slots held there, ``containers.requests.slots``): one
    statement however many rows, no engine call."""
    placed = (
        ContainerInstance.objects.filter(runtime_id=OuterRef("pk"))
        .exclude(status__in=sorted(PLACE_FREE))
        .order_by()
        .values("runtime_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    return runtime_list().annotate(
        instance_count=Coalesce(Subquery(placed, output_field=IntegerField()), 0),
        slot_count=slots_on_runtime(),
    )


@dataclass(frozen=True)
class RuntimeLoad:
    """One runtime's cached health and what it carries (``runtime_loads``)."""

    name: str
    enabled: bool
    health: str  # Runtime.Health, as the last check left it
    instances: dict[str, int]  # by status; statuses with none are absent
    slots: int  # instances holding a create/start slot on it
    cordoned: bool = False  # takes no new placement
    health_since: dt.datetime | None = None  # when it entered its current health
    labels: dict[str, str] = field(default_factory=dict)
    last_error: str = ""
    max_containers: int | None = None  # its capacity (None: no limit of its own)
    max_concurrency: int | None = None

    @property
    def instance_count(self) -> int:
        """Instances placed there, as ``max_containers`` counts them (every state but
        pending and being deleted): the load against its capacity."""
        return sum(n for status, n in self.instances.items() if status not in PLACE_FREE)


def runtime_loads() -> list[RuntimeLoad]:
    """Every runtime by name with its cached health, instances by status and slots held.

    Three queries whatever the number of runtimes or instances (the counts from
    ``instance_counts``, no scan of the instances); no engine call
    (health is what ``containers.execution.health`` last stored on the row).
    """
    runtimes = runtime_list().values_list(
        "id",
        "name",
        "enabled",
        "health",
        "cordoned",
        "health_since",
        "labels",
        "last_error",
        "max_containers",
        "max_concurrency",
    )
    counts: dict[int, dict[str, int]] = {}
    for (runtime_id, status), n in instance_counts().items():
        counts.setdefault(runtime_id, {})[status] = n
    slots = slots_by_runtime()
    return [
        RuntimeLoad(
            name=name,
            enabled=enabled,
            health=health,
            instances=counts.get(pk, {}),
            slots=slots.get(pk, 0),
            cordoned=cordoned,
            health_since=since,
            labels=labels or {},
            last_error=error,
            max_containers=most,
            max_concurrency=slots_most,
        )
        for pk, name, enabled, health, cordoned, since, labels, error, most, slots_most in runtimes
    ]


def runtime_by_id(*, runtime_id: object):
    """A runtime by its id; ``NotFound`` for anything else."""
    key = db_id(runtime_id)
    runtime = runtime_list().filter(pk=key).first() if key is not None else None
    if runtime is None:
        raise NotFound(f"no runtime {runtime_id}", runtime=str(runtime_id))
    return runtime


def orphan_list(*, include_removed: bool = False) -> QuerySet:
    """Containers with our labels and no instance, as the reconciler last saw them."""
    rows = OrphanContainer.objects.select_related("runtime").order_by("-last_seen_at")
    return rows if include_removed else rows.filter(removed_at__isnull=True)


# --- The queue and the dashboard (the API's /api/queue/, the admin dashboard, /metrics) ----------


RELAY_WINDOW_SECONDS = 3600


def queue_stats(*, owner=None) -> dict[str, object]:
    """The create queue and the relay at a glance (API ``/api/queue/``, dashboard, metrics).

    Counts come from the database, so every process answers the same. Without ``owner``:
    the whole installation; ``relay`` sums the per-minute counters over the last hour
    (``window_seconds``), ``in_flight`` is the number of outbox rows in ``processing`` right
    now. With ``owner``: that owner's own counts and the quotas that apply to them, nothing
    about anyone else (no relay counters, no dead letters: those are every tenant's).
    """
    if owner is not None:
        return _owner_queue_stats(owner=owner)
    config = settings.GOBRAVE["container"]
    now = timezone.now()
    counts = count_by_status(ContainerInstance.objects.filter(status=Status.PENDING))
    oldest = _oldest_pending(ContainerInstance.objects.all())
    outbox = outbox_counts([OutboxStatus.DEAD, OutboxStatus.PROCESSING])
    counters = counters_since(now - dt.timedelta(seconds=RELAY_WINDOW_SECONDS))
    return {
        "scope": "installation",
        "pending_count": counts.get(Status.PENDING, 0),
        "active_count": slot_count(),
        "max_pending": config["create_queue_max_pending"],
        "max_concurrency": config["create_queue_max_concurrency"],
        "dead_count": outbox.get(OutboxStatus.DEAD, 0),
        "oldest_pending_age_seconds": _age(oldest, now),
        "relay": {
            "window_seconds": RELAY_WINDOW_SECONDS,
            **{name: counters.get(name, 0) for name in RelayStat},
            "in_flight": outbox.get(OutboxStatus.PROCESSING, 0),
        },
    }


def _oldest_pending(rows: QuerySet[ContainerInstance]):
    rows = rows.filter(status=Status.PENDING).order_by("created_at")
    return rows.values_list("created_at", flat=True).first()


def _age(since, now) -> float | None:
    return max(0.0, round((now - since).total_seconds(), 3)) if since else None


def _owner_queue_stats(*, owner) -> dict[str, object]:
    """One owner's side of the queue: what waits, what is being made, what they hold (as
    ``max_instances_per_owner`` counts it), and their quotas (``tenants.selectors``)."""
    mine = ContainerInstance.objects.filter(owner=owner)
    counts = count_by_status(mine)
    quotas = owner_quotas(owner=owner)
    return {
        "scope": "owner",
        "pending_count": counts.get(Status.PENDING, 0),
        "active_count": sum(counts.get(status, 0) for status in ACTIVE_SLOTS),
        "instance_count": sum(n for status, n in counts.items() if status not in BEING_DELETED),
        "max_pending_per_owner": quotas.max_pending_per_owner,
        "max_instances_per_owner": quotas.max_instances_per_owner,
        "oldest_pending_age_seconds": _age(_oldest_pending(mine), timezone.now()),
    }


DASHBOARD_SERIES = tuple(RequestStat)

DASHBOARD_BUCKET_MINUTES = 5


def request_series(*, now=None, minutes: int = 60, bucket: int = DASHBOARD_BUCKET_MINUTES):
    """Accepted, refused and failed requests per ``bucket`` minutes over the last ``minutes``.

    Read from the per-minute ``core.Counter`` rows (``create_accepted``,
    ``create_refused``, ``instance_failed``). Returns the buckets oldest first, each
    ``{"start": datetime, <name>: count...}``, and the totals over the whole window.
    """
    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    start = end - dt.timedelta(minutes=minutes)
    count = minutes // bucket
    buckets = [
        {"start": start + dt.timedelta(minutes=i * bucket), **dict.fromkeys(DASHBOARD_SERIES, 0)}
        for i in range(count)
    ]
    totals = dict.fromkeys(DASHBOARD_SERIES, 0)
    rows = counter_rows(names=DASHBOARD_SERIES, start=start, end=end)
    for minute, name, value in rows:
        index = min(count - 1, int((minute - start).total_seconds() // (bucket * 60)))
        buckets[index][name] += value
        totals[name] += value
    return {"buckets": buckets, "totals": totals, "bucket_minutes": bucket, "minutes": minutes}


DEAD_KEYS_LIMIT = 10_000


def dead_letters_open_count() -> int:
    """Dead container requests whose instance still exists: the ones that still call for
    the remedy (delete the instance, create anew). A dead row of a deleted instance stays
    for diagnosis but is no longer open. Three queries, however many rows."""
    dead = OutboxEvent.objects.filter(status=OutboxStatus.DEAD, kind__startswith="Container")
    keys = dead.order_by().values_list("aggregate_id", flat=True).distinct()[:DEAD_KEYS_LIMIT]
    ids = []
    for key in keys:
        try:
            ids.append(uuid.UUID(key))
        except ValueError:
            continue
    alive = [
        str(i) for i in ContainerInstance.objects.filter(id__in=ids).values_list("id", flat=True)
    ]
    return dead.filter(aggregate_id__in=alive).count() if alive else 0


def operator_home_counts(
    *, instances: bool, dead_letters: bool, engines: bool, now=None
) -> dict[str, int]:
    """The admin index's at-a-glance counts, only those asked for (the caller knows what
    its user may see): one query for the instances (``running``, ``pending``,
    ``failed_last_hour``: failed with a status change in the last hour), one for the dead
    outbox rows (from their partial index), one for the enabled runtimes
    (``engines_enabled``, and ``engines_reachable`` by their cached health; no engine call).
    """
    counts: dict[str, int] = {}
    if instances:
        since = (now or timezone.now()) - dt.timedelta(hours=1)
        failed_recently = Q(status=Status.FAILED, status_changed_at__gte=since)
        counts.update(
            ContainerInstance.objects.filter(
                status__in=[Status.RUNNING, Status.PENDING, Status.FAILED]
            ).aggregate(
                running=Count("id", filter=Q(status=Status.RUNNING)),
                pending=Count("id", filter=Q(status=Status.PENDING)),
                failed_last_hour=Count("id", filter=failed_recently),
            )
        )
    if dead_letters:
        counts["dead_letters"] = outbox_counts([OutboxStatus.DEAD])[OutboxStatus.DEAD]
    if engines:
        counts.update(
            Runtime.objects.filter(enabled=True).aggregate(
                engines_enabled=Count("id"),
                engines_reachable=Count("id", filter=Q(health=Runtime.Health.REACHABLE)),
            )
        )
    return counts


def dashboard_stats(*, now=None) -> dict[str, object]:
    """Everything the queue dashboard shows: ``queue_stats()`` plus what only it needs."""
    return {
        **queue_stats(),
        "dead_open_count": dead_letters_open_count(),
        "series": request_series(now=now),
        "failures": list(failure_list()),
        "orphan_count": orphan_list().count(),
        "engines": runtime_loads(),
    }
