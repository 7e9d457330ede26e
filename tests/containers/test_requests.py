"""contract §2: every request in every state, and admission under maxPending."""

from __future__ import annotations

import pytest

from containers.errors import InvalidTransition, NoMatchingRuntime, NotFound, QueueFull
from containers.models import ContainerEvent, ContainerInstance, Runtime
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_start,
    container_stop,
)
from core import counters
from core.models import Counter
from outbox.models import OutboxEvent
from tests.factories import InstanceFactory, RuntimeFactory, TemplateFactory
from tests.placing import place

pytestmark = pytest.mark.django_db

# Contract §2, written out once for the tests of the services and of the API: in which
# states each request is accepted, and in which a repeat is a no-op (refused elsewhere).
STATES = [
    "pending", "creating", "running", "paused", "stop_pending", "stopping", "stopped",
    "start_pending", "starting", "delete_pending", "deleting", "failed",
]  # fmt: skip
ACCEPT = {
    "start": {"running", "paused", "stopped"},
    "stop": {"running", "paused", "start_pending"},
    "delete": {"pending", "creating", "running", "paused", "stop_pending", "stopping", "stopped",
               "start_pending", "starting", "failed"},
}  # fmt: skip
NOOP = {
    "start": {"start_pending", "starting"},
    "stop": {"stop_pending", "stopping", "stopped", "failed"},
    "delete": {"delete_pending", "deleting"},
}
# What an accepted request moves the instance to, and the kind of its outbox row.
MOVES = {
    "start": ("start_pending", "ContainerStartRequest"),
    "stop": ("stop_pending", "ContainerStopRequest"),
    "delete": ("delete_pending", "ContainerDeleteRequest"),
}
SERVICES = {"start": container_start, "stop": container_stop, "delete": container_delete}


def _instance_in(state):
    instance = InstanceFactory()
    ContainerInstance.objects.filter(pk=instance.pk).update(status=state)
    return instance


def _expected(action, state):
    if state in ACCEPT[action]:
        return "accepted"
    return "noop" if state in NOOP[action] else "refused"


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("action", ["start", "stop", "delete"])
def test_request_in_every_state(action, state):
    instance = _instance_in(state)
    events_before = ContainerEvent.objects.count()
    expected = _expected(action, state)
    if expected == "refused":
        with pytest.raises(InvalidTransition) as refused:
            SERVICES[action](instance_id=instance.pk, actor="test")
        assert refused.value.details == {"status": state, "action": action}
        assert ContainerInstance.objects.get(pk=instance.pk).status == state
        assert OutboxEvent.objects.count() == 0
        assert ContainerEvent.objects.count() == events_before
        return
    result = SERVICES[action](instance_id=instance.pk, actor="test")
    stored = ContainerInstance.objects.get(pk=instance.pk)
    if expected == "noop":
        assert result.queued is False
        assert stored.status == state
        assert OutboxEvent.objects.count() == 0
        assert ContainerEvent.objects.count() == events_before
    else:
        target, kind = MOVES[action]
        assert result.queued is True
        assert stored.status == target
        row = OutboxEvent.objects.get()
        assert (row.kind, row.aggregate_id, row.status) == (kind, str(instance.pk), "pending")
        event = ContainerEvent.objects.filter(instance_id=instance.pk).get()
        assert (event.kind, event.from_status, event.to_status) == (kind, state, target)


def test_request_for_unknown_instance_is_not_found():
    with pytest.raises(NotFound):
        container_stop(instance_id="00000000-0000-0000-0000-000000000000", actor="test")
    with pytest.raises(NotFound):
        container_stop(instance_id="not-a-uuid", actor="test")


def test_create_writes_instance_outbox_row_and_history(template, owner):
    instance = container_create_by_template(template=template, owner=owner, actor="test")
    assert instance.status == "pending"
    assert instance.runtime is None  # placed when it leaves pending, not when accepted
    row = OutboxEvent.objects.get()
    assert (row.kind, row.aggregate_id, row.queue) == (
        "ContainerCreateRequest",
        str(instance.pk),
        "create",
    )
    assert ContainerEvent.objects.get().to_status == "pending"
    assert instance.spec["name"] == f"gb-{instance.pk}"
    assert instance.spec["labels"]["io.gobrave.instance"] == str(instance.pk)
    assert place(instance).runtime.name == "fake"


@pytest.mark.django_db(transaction=True)  # the buffer is written by its own connection
def test_a_refusal_is_counted_through_the_buffer_where_the_process_buffers(
    template, owner, gobrave_config, monkeypatch
):
    """A web worker buffers its counters: a storm of refusals is one write a second, not
    one UPDATE of the same counter row per refused request."""
    gobrave_config(container={"create_queue_max_pending": 0})
    monkeypatch.setattr(counters, "FLUSH_EVERY", 3600)  # only the stop below flushes
    counters.counters_buffer_start()
    try:
        for _ in range(3):
            with pytest.raises(QueueFull):
                container_create_by_template(template=template, owner=owner, actor="test")
        assert counters._buffer.get("create_refused") == 3, counters._buffer
        assert not Counter.objects.filter(name="create_refused").exists()
    finally:
        counters.counters_buffer_stop()
    assert Counter.objects.get(name="create_refused").count == 3
    assert ContainerInstance.objects.count() == 0


def test_create_refused_at_max_pending_leaves_no_row(template, owner, gobrave_config):
    gobrave_config(container={"create_queue_max_pending": 2})
    for _ in range(2):
        container_create_by_template(template=template, owner=owner, actor="test")
    with pytest.raises(QueueFull) as full:
        container_create_by_template(template=template, owner=owner, actor="test")
    assert full.value.retry_after >= 1
    assert full.value.details["limit"] == 2
    assert ContainerInstance.objects.count() == 2
    assert OutboxEvent.objects.count() == 2
    assert ContainerEvent.objects.count() == 2
    assert Counter.objects.get(name="create_refused").count == 1
    assert Counter.objects.get(name="create_accepted").count == 2


def test_only_pending_instances_count_against_max_pending(template, owner, gobrave_config):
    gobrave_config(container={"create_queue_max_pending": 1})
    first = container_create_by_template(template=template, owner=owner, actor="test")
    ContainerInstance.objects.filter(pk=first.pk).update(status="running")
    container_create_by_template(template=template, owner=owner, actor="test")
    assert ContainerInstance.objects.count() == 2


def test_create_on_template_whose_constraints_match_no_runtime_is_refused(fake_runtime, owner):
    template = TemplateFactory(constraints={"gpu": "yes"})
    with pytest.raises(NoMatchingRuntime, match="gpu=yes"):
        container_create_by_template(template=template, owner=owner, actor="test")
    assert ContainerInstance.objects.count() == 0
    assert OutboxEvent.objects.count() == 0


def test_disabled_runtime_is_never_chosen(owner):
    RuntimeFactory(name="off", labels={"engine": "fake"}, enabled=False)
    on = RuntimeFactory(name="on", labels={"engine": "fake"})
    template = TemplateFactory(constraints={"engine": "fake"})
    for _ in range(3):
        instance = container_create_by_template(template=template, owner=owner, actor="test")
        assert place(instance).runtime == on


def test_among_matching_runtimes_a_create_goes_to_the_least_loaded_answering_one(owner):
    """Placement (``spread``, the default): an engine recorded unreachable gets none; among
    the others the fewest containers (every state but pending and being deleted: a
    stopped one keeps its place), then by name."""
    template = TemplateFactory(constraints={"engine": "fake"})
    busy = RuntimeFactory(name="a-busy", labels={"engine": "fake"})
    idle = RuntimeFactory(name="b-idle", labels={"engine": "fake"})
    away = RuntimeFactory(
        name="0-away", labels={"engine": "fake"}, health=Runtime.Health.UNREACHABLE
    )
    for status in ("running", "creating"):
        InstanceFactory(runtime=busy, template=template, status=status)
    for _ in range(3):
        InstanceFactory(runtime=idle, template=template, status="stopped")
    made = [container_create_by_template(template=template, owner=owner, actor="t") for _ in "123"]
    placed = [place(each) for each in made]
    # busy 2 then 3 (a tie with idle's 3, broken by name), then idle.
    assert [i.runtime.name for i in placed] == ["a-busy", "a-busy", "b-idle"], placed
    assert placed[0].placement_reason == "spread: a-busy 2 least loaded of a-busy, b-idle"
    Runtime.objects.exclude(pk=away.pk).update(health=Runtime.Health.UNREACHABLE)
    Runtime.objects.filter(pk=away.pk).update(health=Runtime.Health.REACHABLE)
    fourth = container_create_by_template(template=template, owner=owner, actor="t")
    assert place(fourth).runtime.name == "0-away"


@pytest.mark.parametrize("name", ["../7", "my box", "-x", "a" * 129])
def test_instance_names_are_refused_unless_plain(template, owner, name):
    from containers.errors import InvalidSpec

    with pytest.raises(InvalidSpec, match="name:"):
        container_create_by_template(template=template, owner=owner, actor="t", name=name)
    assert ContainerInstance.objects.count() == 0


def test_a_template_name_with_spaces_still_gives_a_valid_default_name(fake_runtime, owner):
    template = TemplateFactory(name="My Template/v2")
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert instance.name.startswith("My-Template-v2-")


def test_a_user_cannot_mount_another_users_workspace(fake_runtime, owner, gobrave_config):
    from containers.errors import MountRefused

    gobrave_config(container={"workspace_root": "/srv/ws", "allowed_volume_roots": ["/srv"]})
    template = TemplateFactory(volumes=["/srv/ws/999999:/data"])
    with pytest.raises(MountRefused) as refused:
        container_create_by_template(template=template, owner=owner, actor="t")
    assert "only as $WORKSPACE_PATH" in refused.value.operator_message
    assert "/srv" not in refused.value.message  # the user hears of the volume only


def test_the_workspace_is_mounted_whole_never_a_path_below_it(fake_runtime, owner):
    from containers.errors import InvalidSpec
    from containers.installation import installation_id
    from containers.spec.template_services import template_create

    with pytest.raises(InvalidSpec, match="never a path below it"):
        template_create(name="below", image="busybox", volumes=["$WORKSPACE_PATH/cache:/c"])
    older = TemplateFactory(volumes=["${WORKSPACE_PATH}/cache:/data"])  # saved before the rule
    with pytest.raises(InvalidSpec, match="never a path below it"):
        container_create_by_template(template=older, owner=owner, actor="t")
    own = TemplateFactory(volumes=["$WORKSPACE_PATH:/data"])
    instance = place(container_create_by_template(template=own, owner=owner, actor="t"))
    assert instance.spec["mounts"] == [
        {
            "source": f"gb-ws-{installation_id()}-{owner.pk}",
            "target": "/data",
            "read_only": False,
            "type": "volume",
            "workspace": True,
        }
    ]
