"""``/metrics`` in the Prometheus text format, correct however many processes serve it.

Who may scrape: with ``api.metrics_token`` set, a client sending
``Authorization: Bearer <token>``; without one, clients on the loopback interface only.
A scrape costs the same at a million outbox rows as at a thousand: outbox rows are counted
only in the unfinished and dead states, each read from its own partial index (``sent``
rows, the many, are counted by ``gobrave_relay_events_total{event="sent"}``).

Instances by runtime and status, DAG runs by status and the node durations come from
tallies that the tables' own triggers keep current (``core.tallies``): a scrape sums a
few rows per key, never the instances or runs ever made. Every other count is bounded by
the rows it counts, over an index (pending instances, slots, live leases).

Nothing is kept in process memory: every scrape builds a fresh ``CollectorRegistry``
whose collector reads the database (instance counts by status, outbox rows by status,
the queue numbers of ``containers.selectors.queue_stats``, the streams open (their live
leases, ``core.leases``, one count over an index), each runtime's cached health,
instances and slots from ``containers.selectors.runtime_loads`` and the relay counters
summed over all time), so every web process answers the same. Engine health is what the
last check stored on the runtime row: a scrape never calls an engine. Counters are totals of the
per-minute ``core.Counter`` rows; Prometheus treats a drop (old rows purged) as a reset.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from containers.counters import RequestStat
from containers.models import Runtime
from containers.selectors import instances_by_status, queue_stats, runtime_loads
from containers.states import Status
from core.counters import counter_totals
from core.leases import LeaseScope, leases_live
from dags.selectors import NODE_DURATION_BOUNDS, node_durations, run_counts
from outbox.counters import RelayStat
from outbox.selectors import INDEXED_STATUSES, outbox_counts

COUNTED_OUTBOX = INDEXED_STATUSES


class DatabaseCollector:
    """Reads every number at collect time (one scrape: a fixed handful of grouped queries,
    however many rows)."""

    def collect(self):
        stats = queue_stats()

        by_status = instances_by_status()
        instances = GaugeMetricFamily(
            "gobrave_instances", "Container instances by status.", labels=["status"]
        )
        for state in Status:
            instances.add_metric([state.value], by_status.get(state, 0))
        yield instances

        rows = outbox_counts(COUNTED_OUTBOX)
        outbox = GaugeMetricFamily(
            "gobrave_outbox_rows",
            "Outbox rows by status (sent rows are not counted).",
            labels=["status"],
        )
        for state in COUNTED_OUTBOX:
            outbox.add_metric([state.value], rows.get(state, 0))
        yield outbox

        for name, key, help_text in (
            ("pending", "pending_count", "Create requests waiting (instances in pending)."),
            (
                "active",
                "active_count",
                "Instances holding a create/start slot (creating/starting, not waiting to retry).",
            ),
            ("max_pending", "max_pending", "create_queue_max_pending."),
            ("max_concurrency", "max_concurrency", "create_queue_max_concurrency."),
        ):
            yield GaugeMetricFamily(f"gobrave_queue_{name}", help_text, value=stats[key])
        yield GaugeMetricFamily(
            "gobrave_queue_oldest_pending_age_seconds",
            "Age of the oldest pending instance (0 when none).",
            value=stats["oldest_pending_age_seconds"] or 0,
        )
        yield GaugeMetricFamily(
            "gobrave_relay_in_flight",
            "Outbox rows in processing.",
            value=stats["relay"]["in_flight"],
        )

        yield GaugeMetricFamily(
            "gobrave_streams_open",
            "Streams open (live stream leases), across every web process and host.",
            value=leases_live(scope=LeaseScope.STREAM),
        )

        yield from _engine_metrics(runtime_loads())
        yield from _dag_metrics()

        totals = counter_totals([*RelayStat, *RequestStat])
        relay = CounterMetricFamily(
            "gobrave_relay_events", "Relay outcomes since the counters began.", labels=["event"]
        )
        for name in RelayStat:
            relay.add_metric([name], totals.get(name) or 0)
        yield relay
        requests = CounterMetricFamily(
            "gobrave_requests", "Create admissions and instance failures.", labels=["event"]
        )
        for name in RequestStat:
            requests.add_metric([name], totals.get(name) or 0)
        yield requests


def _engine_metrics(loads):
    """Per runtime: its cached health as a state set and since when, whether it takes new
    instances and whether it is cordoned, its instances by status, the containers placed
    and the create/start slots held on it, and its capacity of each."""
    health = GaugeMetricFamily(
        "gobrave_engine_health",
        "The engine's health as the last check found it (1 for the current state).",
        labels=["runtime", "state"],
    )
    enabled = GaugeMetricFamily(
        "gobrave_engine_enabled", "1 when the runtime takes new instances.", labels=["runtime"]
    )
    since = GaugeMetricFamily(
        "gobrave_engine_health_since_seconds",
        "When the engine entered its current health (Unix time; absent if never checked).",
        labels=["runtime"],
    )
    cordoned = GaugeMetricFamily(
        "gobrave_engine_cordoned",
        "1 when the runtime is cordoned: no new placement, what runs there keeps running.",
        labels=["runtime"],
    )
    instances = GaugeMetricFamily(
        "gobrave_engine_instances",
        "Instances on the runtime by status.",
        labels=["runtime", "status"],
    )
    slots = GaugeMetricFamily(
        "gobrave_engine_slots",
        "Instances on the runtime holding a create/start slot.",
        labels=["runtime"],
    )
    containers = GaugeMetricFamily(
        "gobrave_engine_containers",
        "Instances placed on the runtime as max_containers counts them (every state but "
        "pending, delete_pending and deleting).",
        labels=["runtime"],
    )
    capacity_containers = GaugeMetricFamily(
        "gobrave_engine_capacity_containers",
        "The runtime's max_containers (absent: no limit of its own).",
        labels=["runtime"],
    )
    capacity_slots = GaugeMetricFamily(
        "gobrave_engine_capacity_slots",
        "The runtime's max_concurrency: create/start slots (absent: no limit of its own).",
        labels=["runtime"],
    )
    for load in loads:
        for state in Runtime.Health:
            health.add_metric([load.name, state.value], int(load.health == state))
        enabled.add_metric([load.name], int(load.enabled))
        cordoned.add_metric([load.name], int(load.cordoned))
        if load.health_since is not None:
            since.add_metric([load.name], load.health_since.timestamp())
        for state in Status:
            instances.add_metric([load.name, state.value], load.instances.get(state, 0))
        slots.add_metric([load.name], load.slots)
        containers.add_metric([load.name], load.instance_count)
        if load.max_containers is not None:
            capacity_containers.add_metric([load.name], load.max_containers)
        if load.max_concurrency is not None:
            capacity_slots.add_metric([load.name], load.max_concurrency)
    yield from (health, since, enabled, cordoned, instances, slots, containers)
    yield from (capacity_containers, capacity_slots)


def _dag_metrics():
    """DAG runs by status and the durations of the node runs that finished, by status."""
    runs = GaugeMetricFamily("gobrave_dag_runs", "DAG runs by status.", labels=["status"])
    for status, n in run_counts().items():
        runs.add_metric([status], n)
    yield runs
    durations = HistogramMetricFamily(
        "gobrave_dag_node_duration_seconds",
        "How long DAG nodes ran (started to finished), by the status they ended in.",
        labels=["status"],
    )
    for status, histogram in sorted(node_durations().items()):
        buckets = [
            (str(float(b)), n) for b, n in zip(NODE_DURATION_BOUNDS, histogram.buckets, strict=True)
        ]
        durations.add_metric(
            [status], [*buckets, ("+Inf", histogram.count)], sum_value=histogram.seconds
        )
    yield durations


def _may_scrape(request) -> bool:
    token = settings.GOBRAVE["api"]["metrics_token"]
    if token:
        scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


@require_GET
def metrics_view(request) -> HttpResponse:
    if not _may_scrape(request):
        if settings.GOBRAVE["api"]["metrics_token"]:
            response = HttpResponse("a bearer token is needed\n", status=401)
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        return HttpResponse("metrics answer loopback clients only\n", status=403)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
