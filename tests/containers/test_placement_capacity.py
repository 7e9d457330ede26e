"""Capacity per engine and placement when a create leaves ``pending`` (issue 27, items 2-4
and 7), on the real database with fake engines (placement never asks an engine).

The concurrency tests run the create handler's first step (``handlers._begin``: the
capacity gate, ``placing.create_admit``, ``pending → creating``) from threads, each on
its own connection, over request rows claimed as a relay claims them (``processing``
under a live lease), so every placed instance holds its slot as contract §4 defines it.
Every assertion on rows prints the rows.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from containers.engines import engine_for
from containers.execution.handlers import _begin
from containers.models import ContainerInstance, Runtime
from containers.queues import Queue
from containers.requests.lifecycle import lock_gate
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_start,
    container_stop,
)
from containers.requests.slots import engine_usage
from containers.spec.engine_parts import RUNTIME_NAME_STANDIN, WORKSPACE_PATH_STANDIN
from containers.states import Status
from outbox import registry
from outbox.models import OutboxEvent
from outbox.registry import Defer
from outbox.services import outbox_release_deferred
from tests.factories import RuntimeFactory, TemplateFactory, UserFactory
from tests.placing import place
from tests.processes import outbox_rows, relay_drain, relay_workers, sampling, wait_for

pytestmark = pytest.mark.django_db

POOL = {"engine": "fake", "pool": "p"}


def rows() -> list[tuple]:
    """What the instances say: name, status, engine, why it waits or why it went there."""
    return list(
        ContainerInstance.objects.order_by("created_at").values_list(
            "name", "status", "runtime__name", "status_reason", "placement_reason"
        )
    )


def _engines(tmp_path, **capacities) -> list[Runtime]:
    """Fake engines named by the keywords, each ``(max_containers, max_concurrency)``."""
    return [
        RuntimeFactory(
            name=name,
            base_url=f"fake://{tmp_path / name}",
            labels=dict(POOL),
            max_containers=most,
            max_concurrency=slots,
        )
        for name, (most, slots) in capacities.items()
    ]


def _roomy(gobrave_config, **outbox) -> None:
    """Admission limits out of the way: only the engines' capacity is tested."""
    gobrave_config(
        container={
            "create_queue_max_concurrency": 1000,
            "create_queue_max_pending": 1000,
            "max_pending_per_owner": None,
            "max_instances_per_owner": None,
        },
        outbox={"poll_interval": 0.05, **outbox},
    )


def _in_parallel(work, items: list, threads: int) -> list[str]:
    """Run ``work(item)`` over ``items`` from ``threads`` threads (own connections);
    returns the errors."""
    errors: list[str] = []

    def run(chunk) -> None:
        try:
            for item in chunk:
                work(item)
        except Exception as exc:  # noqa: BLE001 - any error fails the test
            errors.append(repr(exc))
        finally:
            connection.close()

    workers = [threading.Thread(target=run, args=(items[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=240)
    return errors


def _create_all(template, owner, n: int) -> list[OutboxEvent]:
    """``n`` creates accepted from 8 threads at once; their request rows, claimed."""
    errors = _in_parallel(
        lambda _: container_create_by_template(template=template, owner=owner, actor="t"),
        list(range(n)),
        8,
    )
    assert not errors, errors
    OutboxEvent.objects.filter(queue=Queue.CREATE).update(
        status="processing",
        claim_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=timezone.now() + timezone.timedelta(hours=1),
    )
    return list(OutboxEvent.objects.filter(queue=Queue.CREATE).order_by("id"))


def _begin_all(events: list[OutboxEvent]) -> tuple[list[str], Counter, list[dict]]:
    """Every create's first step from 8 threads at once, with a sampler counting each
    engine's usage meanwhile. Returns the errors, the outcomes and the samples."""
    outcomes: Counter = Counter()
    samples: list[dict] = []
    stop = threading.Event()

    def begin(event) -> None:
        try:
            _begin(event, ready=Status.PENDING, doing=Status.CREATING, gated=True)
            outcomes["placed"] += 1
        except Defer:
            outcomes["waits"] += 1

    def sample() -> None:
        try:
            while not stop.wait(0.005):  # paced: the placements need the cores more
                samples.append(engine_usage())
        finally:
            connection.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        errors = _in_parallel(begin, events, 8)
    finally:
        stop.set()
        sampler.join(timeout=60)
    return errors, outcomes, samples


@pytest.mark.django_db(transaction=True)
def test_200_creates_over_engines_of_5_10_and_20_place_exactly_35_never_36(
    postgres, tmp_path, owner, gobrave_config
):
    _roomy(gobrave_config)
    a, b, c = _engines(tmp_path, a=(5, None), b=(10, None), c=(20, None))
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    events = _create_all(template, owner, 200)
    assert ContainerInstance.objects.filter(runtime__isnull=True).count() == 200, rows()
    errors, outcomes, samples = _begin_all(events)
    assert not errors, errors
    placed = Counter(
        ContainerInstance.objects.filter(status="creating").values_list("runtime__name", flat=True)
    )
    assert placed == {"a": 5, "b": 10, "c": 20}, rows()
    assert outcomes == {"placed": 35, "waits": 165}, (outcomes, rows())
    waiting = ContainerInstance.objects.filter(status="pending")
    assert waiting.count() == 165 and not waiting.filter(runtime__isnull=False).exists(), rows()
    assert {i.status_reason for i in waiting} == {
        "waiting: no engine with room: a (5/5), b (10/10), c (20/20)"
    }, rows()
    totals = [sum(u.containers for u in sample.values()) for sample in samples]
    assert samples and max(totals) == 35, (max(totals), len(samples))  # never 36
    for runtime, most in ((a, 5), (b, 10), (c, 20)):
        seen = max(sample.get(runtime.pk).containers for sample in samples if runtime.pk in sample)
        assert seen == most, (runtime.name, seen)


@pytest.mark.django_db(transaction=True)
def test_each_engines_max_concurrency_is_exact_under_100_concurrent_creates(
    postgres, tmp_path, owner, gobrave_config
):
    _roomy(gobrave_config)
    a, b, c = _engines(tmp_path, a=(None, 2), b=(None, 3), c=(None, 4))
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    events = _create_all(template, owner, 100)
    errors, outcomes, samples = _begin_all(events)
    assert not errors, errors
    held = {pk: used.slots for pk, used in engine_usage().items()}
    assert held == {a.pk: 2, b.pk: 3, c.pk: 4}, rows()
    assert outcomes == {"placed": 9, "waits": 91}, (outcomes, rows())
    reasons = set(ContainerInstance.objects.filter(status="pending").values_list("status_reason"))
    assert reasons == {
        ("waiting: no engine with room: a (slots 2/2), b (slots 3/3), c (slots 4/4)",)
    }, rows()
    for runtime, most in ((a, 2), (b, 3), (c, 4)):
        seen = max(s[runtime.pk].slots for s in samples if runtime.pk in s)
        assert seen == most, (runtime.name, seen, rows())


@pytest.mark.django_db(transaction=True)
def test_40_creates_through_concurrent_claims_and_handlers_place_exactly_10_on_caps_2_3_5(
    postgres, tmp_path, owner, gobrave_config, monkeypatch
):
    """The whole path, not ``_begin`` alone: four threads claim (``relay.claim``, whose
    guard judges capped engines: ``claims_within_capacity``) and run the handlers
    (``relay.execute``) at once, while a sampler counts each engine's places."""
    _roomy(gobrave_config, prefetch=5)  # a claim window of 8: every thread claims at once
    a, b, c = _engines(tmp_path, a=(2, None), b=(3, None), c=(5, None))
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    for _ in range(40):
        container_create_by_template(template=template, owner=owner, actor="t")
    guard = registry.claim_guard(Queue.CREATE)
    judged: list[tuple[int, int]] = []  # (rows selected, rows let go), per claim

    def watched(rows):
        allowed = guard(rows)
        judged.append((len(rows), len(allowed)))
        return allowed

    monkeypatch.setitem(registry._claim_guards, Queue.CREATE, watched)
    reason = "waiting: no engine with room: a (2/2), b (3/3), c (5/5)"
    with relay_workers(4) as work, sampling(engine_usage, interval=0.005) as samples:
        wait_for(
            lambda: (
                work.errors
                or (
                    ContainerInstance.objects.filter(status="running").count() == 10
                    and ContainerInstance.objects.filter(
                        status="pending", status_reason=reason
                    ).count()
                    == 30
                )
            ),
            timeout=60,
            message="10 running, 30 waiting with the reason",
            describe=lambda: f"{rows()}\n{outbox_rows()}",
        )
    assert not work.errors, work.errors
    placed = Counter(
        ContainerInstance.objects.filter(status="running").values_list("runtime__name", flat=True)
    )
    assert placed == {"a": 2, "b": 3, "c": 5}, rows()
    assert not ContainerInstance.objects.filter(status="pending", runtime__isnull=False), rows()
    requests = OutboxEvent.objects.filter(queue=Queue.CREATE)
    assert set(requests.values_list("status", "attempts")) == {("pending", 0), ("sent", 0)}, (
        outbox_rows()
    )
    assert requests.filter(status="sent").count() == work.outcomes["sent"] == 10, (
        work.outcomes,
        rows(),
    )
    assert sum(selected - allowed for selected, allowed in judged) > 0, judged  # parked
    totals = [sum(u.containers for u in sample.values()) for sample in samples]
    assert samples and max(totals) == 10, (max(totals), len(samples))  # never 11
    for runtime, most in ((a, 2), (b, 3), (c, 5)):
        seen = max(sample.get(runtime.pk).containers for sample in samples if runtime.pk in sample)
        assert seen == most, (runtime.name, seen)


def test_spread_takes_the_least_loaded_relative_to_capacity_and_pack_fills_one_first(
    tmp_path, owner, gobrave_config
):
    _roomy(gobrave_config)
    _engines(tmp_path, big=(4, None), small=(2, None))
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})

    def placed_on(n: int) -> list[str]:
        made = [
            container_create_by_template(template=template, owner=owner, actor="t")
            for _ in range(n)
        ]
        return [place(each).runtime.name for each in made]

    # spread: big 0/4 = small 0/2 (the name), then small 0/2 < big 1/4, then big 1/4 < 1/2 ...
    assert placed_on(3) == ["big", "small", "big"], rows()
    assert rows()[-1][4] == "spread: big 1/4 least loaded of big, small", rows()
    gobrave_config(container={"placement": "pack"})
    assert placed_on(3) == ["big", "big", "small"], rows()  # big full at 4/4, then small
    assert rows()[-2][4] == "pack: big 3/4, first with room of big, small", rows()


def test_labels_still_filter_and_an_unreachable_engine_gets_no_placement(
    tmp_path, owner, gobrave_config
):
    _roomy(gobrave_config)
    plain, gpu, away = _engines(tmp_path, plain=(None, None), gpu=(None, None), away=(None, None))
    Runtime.objects.filter(pk=gpu.pk).update(labels={**POOL, "gpu": "yes"})
    Runtime.objects.filter(pk=away.pk).update(
        labels={**POOL, "gpu": "yes"}, health=Runtime.Health.UNREACHABLE
    )
    on_gpu = TemplateFactory(name="gpu", constraints={"gpu": "yes"})
    for _ in range(3):  # gpu fills up relative to plain, yet only gpu matches
        made = container_create_by_template(template=on_gpu, owner=owner, actor="t")
        assert place(made).runtime.name == "gpu", rows()
    Runtime.objects.filter(pk=gpu.pk).update(cordoned=True)
    waiting = place(container_create_by_template(template=on_gpu, owner=owner, actor="t"))
    assert (waiting.status, waiting.runtime) == ("pending", None), rows()
    assert waiting.status_reason.startswith(
        "waiting: no engine with room: away unreachable since "
    ), rows()
    assert waiting.status_reason.endswith(", gpu cordoned"), rows()


def test_the_engine_parts_of_the_spec_are_resolved_when_the_create_is_placed(
    tmp_path, owner, gobrave_config
):
    _roomy(gobrave_config)
    (vol,) = _engines(tmp_path, vol=(None, None))
    template = TemplateFactory(
        name="where",
        constraints={"pool": "p"},
        env={"ON": "$RUNTIME_NAME", "WS": "$WORKSPACE_PATH"},
        volumes=["$WORKSPACE_PATH:/data"],
    )
    made = container_create_by_template(template=template, owner=owner, actor="t")
    stored = ContainerInstance.objects.get(pk=made.pk)
    assert stored.runtime is None, rows()
    assert stored.spec["env"] == {"ON": RUNTIME_NAME_STANDIN, "WS": WORKSPACE_PATH_STANDIN}
    assert stored.spec["placement"]["engine"] == "", stored.spec
    placed = place(made)
    volume = placed.spec["mounts"][0]["source"]
    assert volume.startswith("gb-ws-") and volume.endswith(f"-{owner.pk}"), placed.spec
    assert placed.spec["env"] == {"ON": "vol", "WS": volume}, placed.spec
    assert placed.spec["workspace"]["source"] == volume and placed.spec["mounts"][0]["type"] == (
        "volume"
    ), placed.spec
    assert placed.spec["placement"]["engine"] == "vol", placed.spec
    # The same template on an engine whose workspaces are directories.
    Runtime.objects.filter(pk=vol.pk).update(
        workspace_driver=Runtime.WorkspaceDriver.DIRECTORY, name="dir"
    )
    placed = place(container_create_by_template(template=template, owner=owner, actor="t"))
    mount = placed.spec["mounts"][0]
    assert mount["type"] == "bind" and mount["source"].endswith(f"/{owner.pk}"), placed.spec
    assert placed.spec["env"] == {"ON": "dir", "WS": mount["source"]}, placed.spec


def test_a_waiting_create_goes_when_a_delete_frees_room(tmp_path, owner, gobrave_config):
    _roomy(gobrave_config)
    (only,) = _engines(tmp_path, only=(1, None))
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    first = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"], rows()
    second = container_create_by_template(template=template, owner=owner, actor="t")
    # The claim guard leaves it unclaimed (parked, no attempt), saying why.
    assert relay_drain() == [], (rows(), outbox_rows())
    row = OutboxEvent.objects.get(aggregate_id=str(second.pk))
    assert (row.status, row.attempts, row.outcome) == ("pending", 0, "deferred"), outbox_rows()
    assert rows()[1][1:4] == ("pending", None, "waiting: no engine with room: only (1/1)"), rows()
    assert relay_drain() == [], rows()  # not selected again on the next poll
    container_delete(instance_id=first.pk, actor="t")  # its place frees when accepted
    assert sorted(relay_drain()) == ["sent", "sent"], (rows(), outbox_rows())
    assert rows() == [("pooled-" + str(second.pk)[:8], "running", "only", "", rows()[0][4])], rows()
    assert engine_for(only).calls("create") and len(engine_for(only).calls("create")) == 2


def test_creates_waiting_on_a_full_engine_go_in_fair_share_order_not_acceptance_order(
    tmp_path, owner, gobrave_config
):
    """Contract §3 (fair share): when a place frees, the waiting owner served least
    recently goes first (bob, never served), not the oldest create (alice's, accepted
    first and first by key too); then alice's oldest."""
    _roomy(gobrave_config)
    _engines(tmp_path, only=(1, None))
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    # "alice" is the owner whose fairness key sorts first: a tie would go to her too.
    alice, bob = sorted((owner, UserFactory(username="bob")), key=lambda user: str(user.pk))
    holder = container_create_by_template(template=template, owner=alice, actor="t")
    assert relay_drain() == ["sent"], rows()  # alice served: her turn is the last one
    waiting = [
        container_create_by_template(template=template, owner=who, actor="t")
        for who in (alice,) * 5 + (bob,)
    ]
    for _ in waiting[::3]:  # each claim's window (3) judges three: every one parked
        assert relay_drain() == [], (rows(), outbox_rows())

    def states() -> list[tuple[str, str | None, str] | None]:
        found = ContainerInstance.objects.select_related("runtime").in_bulk(
            [each.pk for each in waiting]
        )
        return [
            (row.status, row.runtime and row.runtime.name, row.status_reason) if row else None
            for row in (found.get(each.pk) for each in waiting)
        ]

    full = ("pending", None, "waiting: no engine with room: only (1/1)")
    assert states() == [full] * 6, rows()
    container_delete(instance_id=holder.pk, actor="t")  # one place frees
    relay_drain()
    assert states() == [full] * 5 + [("running", "only", "")], (rows(), outbox_rows())
    container_delete(instance_id=waiting[-1].pk, actor="t")  # bob's: it frees again
    relay_drain()
    assert states() == [("running", "only", "")] + [full] * 4 + [None], (rows(), outbox_rows())


def test_a_start_goes_back_to_its_cordoned_engine_and_waits_while_it_is_full(
    tmp_path, owner, gobrave_config
):
    _roomy(gobrave_config)
    home, other = _engines(tmp_path, home=(None, 1), other=(None, None))
    Runtime.objects.filter(pk=other.pk).update(labels={"engine": "fake", "pool": "q"})
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    mine = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"], rows()
    container_stop(instance_id=mine.pk, actor="t")
    assert relay_drain() == ["sent"], rows()
    Runtime.objects.filter(pk=other.pk).update(labels=dict(POOL))  # room elsewhere now
    Runtime.objects.filter(pk=home.pk).update(cordoned=True)
    # Another instance holds home's one slot (its create claimed and under way).
    holder = container_create_by_template(template=template, owner=owner, actor="t", runtime=home)
    ContainerInstance.objects.filter(pk=holder.pk).update(status="creating")
    OutboxEvent.objects.filter(aggregate_id=str(holder.pk)).update(
        status="processing",
        claim_token="00000000-0000-0000-0000-000000000002",
        lease_expires_at=timezone.now() + timezone.timedelta(hours=1),
    )
    container_start(instance_id=mine.pk, actor="t")
    assert relay_drain() == [], (rows(), outbox_rows())
    status, runtime, reason = ContainerInstance.objects.filter(pk=mine.pk).values_list(
        "status", "runtime__name", "status_reason"
    )[0]
    assert (status, runtime) == ("start_pending", "home"), rows()
    assert reason == "waiting: engine of runtime home is full (slots 1/1)", rows()
    # The slot frees: the start goes, to its own (still cordoned) engine.
    ContainerInstance.objects.filter(pk=holder.pk).update(status="running")
    OutboxEvent.objects.filter(aggregate_id=str(holder.pk)).update(status="sent")
    outbox_release_deferred(queue=Queue.CREATE)
    assert relay_drain() == ["sent"], (rows(), outbox_rows())
    status, runtime = ContainerInstance.objects.filter(pk=mine.pk).values_list(
        "status", "runtime__name"
    )[0]
    assert (status, runtime) == ("running", "home"), rows()
    assert engine_for(other).calls("create") == [], rows()


def test_a_create_placed_among_several_engines_holds_the_gate_for_three_statements(
    tmp_path, owner, gobrave_config
):
    # Creates at once queue on the capacity gate (docs/benchmarks.md section 12): after
    # its lock, only each engine's slots, the instance tally and the move (which also
    # writes the placement), then the commit.
    _roomy(gobrave_config)
    _engines(tmp_path, a=(None, None), b=(None, None), c=(None, None))
    template = TemplateFactory(name="pooled", constraints={"pool": "p"})
    made = container_create_by_template(template=template, owner=owner, actor="t")
    OutboxEvent.objects.filter(queue=Queue.CREATE).update(
        status="processing",
        claim_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=timezone.now() + timezone.timedelta(hours=1),
    )
    event = OutboxEvent.objects.get(queue=Queue.CREATE)
    with transaction.atomic():
        lock_gate("capacity")  # its row exists (a flushed database has none: made again)
    with CaptureQueriesContext(connection) as captured:
        _begin(event, ready=Status.PENDING, doing=Status.CREATING, gated=True)
    statements = [q["sql"] for q in captured if "SAVEPOINT" not in q["sql"]]
    gate = max(i for i, sql in enumerate(statements) if '"containers_gate"' in sql)
    under = statements[gate + 1 :]
    assert len(under) == 3, "\n".join(statements)
    placed = ContainerInstance.objects.select_related("runtime").get(pk=made.pk)
    assert placed.status == "creating" and placed.runtime.name == "a", rows()
    assert placed.placement_reason.startswith("spread: a 0 least loaded of a, b, c"), rows()
    assert placed.spec["placement"]["engine"] == "a", placed.spec
