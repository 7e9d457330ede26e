"""Placement, capacity, cordon and decommission on real engines (issue 27): the fake
engine's tests (test_placement_capacity.py, test_fleet.py) again, briefly, where the
containers really run.

Two private ``dockerd``s (``tests/private_engine.py``, each in a network namespace of
its own), shared by the module: ``a`` takes 2 containers, ``b`` 1 and is labelled
``disk=ssd``. Creates go through the services and the handlers (``relay_drain``: claims
with the create queue's guard, then ``handle_create`` calling the engine). Each test has
its own installation id, so what an engine holds is counted per test. The decommission
test has a third engine of its own, destroyed before the decommission.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Iterator

import pytest

from containers.engines.labels import LABEL_INSTALLATION
from containers.fleet.services import DECOMMISSIONED, runtime_cordon, runtime_decommission
from containers.models import ContainerEvent, ContainerInstance, Runtime, RuntimeEvent
from containers.requests.services import container_create_by_template
from tests.containers.conftest import IMAGE, _unavailable
from tests.containers.test_fleet import engines_asked  # noqa: F401 - a fixture
from tests.factories import TemplateFactory
from tests.private_engine import PrivateDockerd, missing_tools
from tests.processes import outbox_rows, relay_drain

pytestmark = [pytest.mark.docker, pytest.mark.django_db]

POOL = {"engine": "docker", "pool": "p"}


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, PrivateDockerd]]:
    if reason := missing_tools():
        _unavailable(reason)
    made = {name: PrivateDockerd(f"place{name}") for name in ("a", "b")}
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda engine: engine.start_with(IMAGE), made.values()))
        yield made
    finally:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda engine: engine.destroy(), made.values()))


@pytest.fixture
def installation(postgres, gobrave_config) -> str:
    installation = f"test-{uuid.uuid4().hex[:12]}"
    gobrave_config(
        container={
            "installation_id": installation,
            "create_queue_max_concurrency": 10,
            "max_pending_per_owner": None,
        }
    )
    Runtime.objects.all().delete()  # the migration's "local" row is the machine's engine
    return installation


@pytest.fixture
def fleet(engines, installation) -> Iterator[dict[str, Runtime]]:
    """Runtime rows for ``a`` (2 places) and ``b`` (1 place, ``disk=ssd``); the test's
    containers are removed from both engines afterwards."""
    yield {
        "a": Runtime.objects.create(
            name="a", driver="docker", base_url=engines["a"].url, labels=POOL, max_containers=2
        ),
        "b": Runtime.objects.create(
            name="b",
            driver="docker",
            base_url=engines["b"].url,
            labels={**POOL, "disk": "ssd"},
            max_containers=1,
        ),
    }
    for engine in engines.values():
        _remove_ours(engine, installation)


def _remove_ours(engine: PrivateDockerd, installation: str) -> None:
    with engine.client() as client:
        for container in client.containers(
            all=True, filters={"label": f"{LABEL_INSTALLATION}={installation}"}
        ):
            client.remove_container(container["Id"], force=True)


def _running_on(engine: PrivateDockerd, installation: str) -> list[str]:
    """The names of the containers of this test that run on ``engine``, sorted."""
    with engine.client() as client:
        found = client.containers(filters={"label": f"{LABEL_INSTALLATION}={installation}"})
    return sorted(name.lstrip("/") for each in found for name in each["Names"])


def _create(template, owner) -> ContainerInstance:
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    relay_drain()
    return ContainerInstance.objects.select_related("runtime").get(pk=instance.pk)


def _where(instance: ContainerInstance) -> tuple[str, str | None, str]:
    """What the instance says: status, engine, and why it went there (or why it waits)."""
    runtime = instance.runtime.name if instance.runtime else None
    return instance.status, runtime, instance.placement_reason or instance.status_reason


def test_spread_labels_and_caps_on_real_engines(engines, fleet, installation, owner):
    pooled = TemplateFactory(name="pooled", constraints={"pool": "p"})
    on_ssd = TemplateFactory(name="ssd", constraints={"disk": "ssd"})
    # spread: a 0/2 and b 0/1 tie (the name), then b 0/1 is less loaded than a 1/2.
    first, second = _create(pooled, owner), _create(pooled, owner)
    assert [_where(first), _where(second)] == [
        ("running", "a", "spread: a 0/2 least loaded of a, b"),
        ("running", "b", "spread: b 0/1 least loaded of a, b"),
    ], outbox_rows()
    # Only b has the label: a's free place is no room for it.
    assert _where(_create(on_ssd, owner)) == (
        "pending", None, "waiting: no engine with room: b (1/1)",
    ), outbox_rows()  # fmt: skip
    third = _create(pooled, owner)
    assert _where(third) == ("running", "a", "spread: a 1/2 least loaded of a"), outbox_rows()
    assert _where(_create(pooled, owner)) == (
        "pending", None, "waiting: no engine with room: a (2/2), b (1/1)",
    ), outbox_rows()  # fmt: skip
    assert _running_on(engines["a"], installation) == sorted(
        [first.container_name, third.container_name]
    )
    assert _running_on(engines["b"], installation) == [second.container_name]


def test_pack_fills_one_real_engine_before_the_next(
    engines, fleet, installation, owner, gobrave_config
):
    gobrave_config(container={"placement": "pack"})
    pooled = TemplateFactory(name="pooled", constraints={"pool": "p"})
    made = [_create(pooled, owner) for _ in range(3)]
    assert [_where(each) for each in made] == [
        ("running", "a", "pack: a 0/2, first with room of a, b"),
        ("running", "a", "pack: a 1/2, first with room of a, b"),
        ("running", "b", "pack: b 0/1, first with room of b"),
    ], outbox_rows()
    assert _running_on(engines["a"], installation) == sorted(e.container_name for e in made[:2])
    assert _running_on(engines["b"], installation) == [made[2].container_name]


def test_a_cordoned_real_engine_takes_no_new_create_and_its_container_runs_on(
    engines, fleet, installation, owner
):
    pooled = TemplateFactory(name="pooled", constraints={"pool": "p"})
    kept = _create(pooled, owner)
    assert _where(kept)[:2] == ("running", "a"), outbox_rows()
    with engines["a"].client() as client:
        began = client.inspect_container(kept.container_id)["State"]["StartedAt"]
    runtime_cordon(runtime_id=fleet["a"].pk, actor="user:op", reason="kernel update")
    # a has the more room (0 of 2 free against 1 of 1), yet the next create goes to b.
    assert _where(_create(pooled, owner))[:2] == ("running", "b"), outbox_rows()
    assert _where(_create(pooled, owner)) == (
        "pending", None, "waiting: no engine with room: a cordoned, b (1/1)",
    ), outbox_rows()  # fmt: skip
    kept = ContainerInstance.objects.get(pk=kept.pk)
    with engines["a"].client() as client:
        state = client.inspect_container(kept.container_id)["State"]
    assert (kept.status, state["Running"], state["StartedAt"]) == ("running", True, began), state
    assert _running_on(engines["a"], installation) == [kept.container_name]


def test_decommission_of_a_destroyed_engine_forgets_its_instances_without_calling_it(
    installation,
    owner,
    engines_asked,  # noqa: F811 - the fixture imported above
):
    if reason := missing_tools():
        _unavailable(reason)
    lost = PrivateDockerd("placelost")
    try:
        lost.start_with(IMAGE)
        runtime = Runtime.objects.create(
            name="lost", driver="docker", base_url=lost.url, labels={"pool": "q"}
        )
        template = TemplateFactory(name="on-lost", constraints={"pool": "q"})
        made = [_create(template, owner) for _ in range(2)]
        assert [_where(each)[:2] for each in made] == [("running", "lost")] * 2, outbox_rows()
        assert len(_running_on(lost, installation)) == 2
    finally:
        lost.destroy()  # the host is gone for good, with its containers
    engines_asked.clear()

    result = runtime_decommission(runtime_id=runtime.pk, actor="user:op", reason="host lost")

    assert engines_asked == [], engines_asked  # no engine call, not even a client
    assert sorted(pk for pk, _ in result.instances) == sorted(e.pk for e in made), result
    assert not ContainerInstance.objects.filter(runtime=runtime).exists()
    for instance in made:
        history = list(
            ContainerEvent.objects.filter(instance_id=instance.pk)
            .order_by("created_at", "id")
            .values_list("kind", "to_status", "message")
        )
        assert history[0][:2] == ("ContainerCreateRequest", "pending"), history  # kept
        assert "running" in [to for _, to, _ in history], history
        assert history[-1] == (
            "ContainerDeleted", "", f"{DECOMMISSIONED}: runtime lost: instance deleted without "
            "calling the engine",
        ), history  # fmt: skip
    kinds = list(
        RuntimeEvent.objects.filter(runtime_id=runtime.pk)
        .order_by("created_at", "id")
        .values_list("kind", flat=True)
    )
    assert kinds[-2:] == ["engine.decommissioning", "engine.decommissioned"], kinds
    row = Runtime.objects.get(pk=runtime.pk)
    assert (row.enabled, row.cordoned, row.decommissioned_at is not None) == (
        False, True, True,
    ), vars(row)  # fmt: skip
