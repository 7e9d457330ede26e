"""Whole lifecycles on the real Docker Engine, through the real processes.

Each test runs a dispatcher, both django-q2 clusters and ``run_monitor`` against the test
database and the local engine (``scripts/test-engine.sh`` starts it and builds
gobrave-test-busybox:latest; nothing is pulled). The Docker fixtures (``dock``,
``pipeline``) live in this directory's conftest.py; the helpers below are shared with
test_monitor.py.
"""

from __future__ import annotations

import pytest

from containers.errors import NoMatchingRuntime
from containers.models import ContainerEvent, ContainerInstance, ContainerTemplate
from containers.requests.services import (
    container_create_by_template,
    container_delete,
    container_start,
    container_stop,
)
from tests.containers.conftest import HOG, IMAGE
from tests.processes import App, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def status(instance: ContainerInstance) -> str | None:
    row = ContainerInstance.objects.filter(pk=instance.pk).first()
    return row.status if row else None


def reaches(instance: ContainerInstance, wanted: str, timeout: float = 30) -> ContainerInstance:
    wait_for(
        lambda: status(instance) == wanted,
        timeout=timeout,
        message=f"{instance.name} {wanted} (is {status(instance)})",
        describe=lambda: _said(instance),
    )
    return ContainerInstance.objects.get(pk=instance.pk)


def _said(instance: ContainerInstance) -> str:
    """What the instance row, its engine's row and its requests say (a timeout's detail)."""
    from outbox.models import OutboxEvent

    row = ContainerInstance.objects.filter(pk=instance.pk).select_related("runtime").first()
    if row is None:
        return "the instance row is gone"
    runtime = row.runtime
    engine = f"{runtime.name} {runtime.health} {runtime.last_error!r}" if runtime else "unplaced"
    requests = OutboxEvent.objects.filter(aggregate_id=str(instance.pk)).order_by("id")
    lines = [f"{row.status} reason={row.status_reason!r} engine={engine}"]
    lines += [
        f"  #{r.id} {r.kind} {r.status} attempts={r.attempts} outcome={r.outcome!r} "
        f"available_at={r.available_at} error={r.last_error!r}"
        for r in requests
    ]
    return "\n".join(lines)


def transitions(instance: ContainerInstance) -> list[tuple[str, str]]:
    rows = ContainerEvent.objects.filter(instance_id=instance.pk, to_status__gt="")
    return [(r.from_status, r.to_status) for r in rows.order_by("id") if r.from_status]


def create(template: ContainerTemplate, owner, **kwargs) -> ContainerInstance:
    return container_create_by_template(template=template, owner=owner, actor="test", **kwargs)


# -- the happy path -----------------------------------------------------------------------------


def test_create_start_stop_delete_leaves_no_container_and_keeps_the_history(dock, pipeline, owner):
    instance = create(dock.template(["sleep", "1000"]), owner)
    row = reaches(instance, "running")
    assert dock.engine_state(instance)["Status"] == "running"
    assert row.container_id and row.runtime_node_name
    container_stop(instance_id=instance.pk, actor="test")
    assert reaches(instance, "stopped").exit_code == 137  # sleep as pid 1 ignores TERM
    assert dock.engine_state(instance)["Status"] == "exited"
    container_start(instance_id=instance.pk, actor="test")
    reaches(instance, "running")
    assert dock.engine_state(instance)["Status"] == "running"
    container_delete(instance_id=instance.pk, actor="test")
    wait_for(lambda: status(instance) is None, timeout=30, message="row removed")
    assert dock.engine_state(instance) is None
    assert dock.containers() == []
    assert transitions(instance) == [
        ("pending", "creating"),
        ("creating", "running"),
        ("running", "stop_pending"),
        ("stop_pending", "stopping"),
        ("stopping", "stopped"),
        ("stopped", "start_pending"),
        ("start_pending", "starting"),
        ("starting", "running"),
        ("running", "delete_pending"),
        ("delete_pending", "deleting"),
    ]
    assert ContainerEvent.objects.filter(instance_id=instance.pk, kind="ContainerDeleted").exists()
    assert app_exits_cleanly(pipeline)


def app_exits_cleanly(app: App) -> bool:
    """The monitor, blocked on its event stream, still exits 0 on SIGTERM."""
    return app.stop("monitor", timeout=15) == 0


# -- exits ----------------------------------------------------------------------------------------


def test_a_command_exiting_zero_ends_stopped_with_its_code(dock, pipeline, owner):
    instance = create(dock.template("exit 0"), owner)
    row = reaches(instance, "stopped")
    assert row.exit_code == 0
    assert row.finished_at is not None


def test_a_command_exiting_three_ends_failed_with_its_code(dock, pipeline, owner):
    instance = create(dock.template("exit 3"), owner)
    row = reaches(instance, "failed")
    assert (row.exit_code, row.status_reason) == (3, "exited with code 3")
    assert dock.engine_state(instance)["ExitCode"] == 3  # kept for its logs


def test_a_start_whose_command_exits_at_once_goes_starting_running_stopped(dock, pipeline, owner):
    instance = create(dock.template("exit 0"), owner)
    reaches(instance, "stopped")
    container_start(instance_id=instance.pk, actor="test")
    wait_for(
        lambda: (
            transitions(instance)[-1:] == [("running", "stopped")]
            and len(transitions(instance)) > 3
        ),
        timeout=30,
        message="stopped again",
    )
    assert transitions(instance)[-4:] == [
        ("stopped", "start_pending"),
        ("start_pending", "starting"),
        ("starting", "running"),
        ("running", "stopped"),
    ]
    assert status(instance) == "stopped"


def test_stop_of_a_process_ignoring_sigterm_still_ends_stopped(dock, pipeline, owner):
    instance = create(dock.template("trap '' TERM; sleep 1000"), owner)
    reaches(instance, "running")
    container_stop(instance_id=instance.pk, actor="test")
    row = reaches(instance, "stopped", timeout=20)
    assert row.exit_code == 137
    assert dock.engine_state(instance)["Status"] == "exited"


def test_running_out_of_memory_ends_failed_oomkilled(dock, pipeline, owner):
    if not dock.client.info().get("MemoryLimit"):
        pytest.skip("this engine's cgroup setup does not enforce memory limits")
    instance = create(dock.template(HOG, resources={"memory": "6m"}), owner)
    row = reaches(instance, "failed")
    assert (row.status_reason, row.exit_code) == ("OOMKilled", 137)


# -- crash recovery and refusals ------------------------------------------------------------------


def test_a_create_whose_worker_died_after_the_runtime_create_adopts_the_container(dock, owner):
    instance = create(dock.template(["sleep", "1000"]), owner)
    spec = instance.spec
    # What the dead worker left: the container, made and never started.
    made = dock.client.create_container(
        IMAGE,
        command=spec["command"],
        name=spec["name"],
        labels=spec["labels"],
        host_config=dock.client.create_host_config(restart_policy={"Name": "no"}),
    )
    with dock.app() as app:
        app.dispatcher()
        app.cluster("create")
        app.monitor()
        row = reaches(instance, "running")
    [container] = dock.containers(name=f"^/gb-{instance.pk}$")
    assert container["Id"] == made["Id"] == row.container_id
    assert len(dock.containers()) == 1
    assert container["State"] == "running"


def test_a_created_container_shows_on_its_instance_before_it_started(
    dock, owner, monkeypatch, gobrave_config
):
    """The engine's id is on the instance (API and admin) from the engine's create on; the
    create retried after a failed start adopts that container and starts it."""
    from django.test import Client
    from django.urls import reverse

    from containers.engines.base import EngineError
    from containers.engines.docker import DockerEngine
    from outbox import relay
    from outbox.models import OutboxEvent
    from outbox.services import outbox_retry_now
    from tests.admin.conftest import make_user
    from tests.api.helpers import token_client
    from tests.processes import outbox_rows

    gobrave_config(outbox={"backoff_base": 600, "backoff_cap": 600})  # due only on retry now
    real_start, failures = DockerEngine.start, []

    def start_once_refused(self, ref, spec=None):
        if not failures:
            failures.append(ref)
            raise EngineError("the engine went away between create and start")
        return real_start(self, ref, spec)

    monkeypatch.setattr(DockerEngine, "start", start_once_refused)
    instance = create(dock.template(["sleep", "1000"]), owner)
    [(event_id, token)] = relay.claim("create", 1)
    assert relay.execute(event_id, token) == "retried", outbox_rows()
    [held] = dock.containers(name=f"^/gb-{instance.pk}$")
    assert held["State"] == "created"
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.container_id) == ("creating", held["Id"]), outbox_rows()

    body = token_client(owner).get(f"/api/containers/{instance.pk}/").json()
    assert (body["status"], body["container_id"]) == ("creating", held["Id"])
    admin = Client()
    admin.force_login(make_user("root", superuser=True))
    page = admin.get(reverse("admin:containers_containerinstance_change", args=[instance.pk]))
    assert f'<code title="{held["Id"]}">{held["Id"][:12]}</code>' in page.content.decode()

    outbox_retry_now(event_id=OutboxEvent.objects.get(aggregate_id=str(instance.pk)).id)
    [(event_id, token)] = relay.claim("create", 1)
    assert relay.execute(event_id, token) == "sent", outbox_rows()
    row.refresh_from_db()
    [container] = dock.containers()
    assert (row.status, row.container_id) == ("running", held["Id"]), outbox_rows()
    assert (container["Id"], container["State"]) == (held["Id"], "running")


def test_the_console_says_what_is_true_of_a_silent_running_sleep_and_a_failed_exit(dock, owner):
    """The instance page and list on the real engine: no false alarm for a running
    ``sleep`` (no output yet, present), no Django change history beside the event history,
    times to the second, and list columns that say what is wrong (exit code and reason,
    age with the exact time on hover, image, runtime, short id)."""
    import re

    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from containers.execution.reconciler import reconcile
    from outbox import relay
    from tests.admin.conftest import make_user
    from tests.processes import outbox_rows

    sleeper = create(dock.template(["sleep", "1000"]), owner)
    failing = create(dock.template(["sh", "-c", "exit 3"]), owner)
    for event_id, token in relay.claim("create", 2):
        relay.execute(event_id, token)
    sleeper = reaches(sleeper, "running")
    # The create's own inspect may come before ``exit 3`` did (then it says running);
    # without a monitor here, the reconciler applies the exit, as the monitor would.
    wait_for(
        lambda: (reconcile(), status(failing))[1] == "failed",
        timeout=30,
        message=f"{failing.name} failed",
        describe=lambda: f"is {status(failing)}\n{outbox_rows()}",
    )
    failing = ContainerInstance.objects.get(pk=failing.pk)
    assert failing.exit_code == 3, outbox_rows()
    admin = Client()
    admin.force_login(make_user("root", superuser=True))

    page = admin.get(reverse("admin:containers_containerinstance_change", args=[sleeper.pk]))
    html = page.content.decode()
    assert "no output yet: the container has written nothing to stdout or stderr" in html
    assert "present when last seen" in html and ">missing<" not in html
    assert f'<code title="{sleeper.container_id}">' in html
    assert "/history/" not in html  # Django's empty change history is not offered ...
    assert 'id="gb-history"' in html and f"instance_id={sleeper.pk}" in html  # ... the events are
    started = timezone.localtime(sleeper.started_at).strftime("%Y-%m-%d %H:%M:%S")
    assert started in html, "times on the page are to the second"

    listing = admin.get(reverse("admin:containers_containerinstance_changelist")).content.decode()
    row = re.search(rf"<tr>(?:(?!</tr>).)*{failing.name}(?:(?!</tr>).)*</tr>", listing, re.S)
    assert row, listing
    cells = row.group(0)
    assert "exit 3: exited with code 3" in cells
    assert f'<code title="{failing.pk}">{str(failing.pk)[:8]}</code>' in cells
    assert IMAGE in cells and dock.runtime.name in cells
    assert re.search(
        r'<time datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d">[^<]+ ago</time>',
        cells,
    ), cells


def test_following_the_logs_stops_at_one_mebibyte_while_the_container_runs_on(dock, owner):
    """``GET logs/?follow=1`` is bounded in size: a container that wrote 1.5 MB and runs on
    gives 1 MiB and a note saying the output was cut, and the stream ends there (long
    before its 60 seconds)."""
    from containers.engines.calls import LOG_MAX_BYTES
    from outbox import relay
    from tests.api.helpers import stream_get, token_client

    # 1500 lines of 1000 bytes, then silence: all within the tail asked for.
    command = (
        'line=$(head -c 999 /dev/zero | tr "\\0" a); yes "$line" | head -c 1500000; sleep 1000'
    )
    instance = create(dock.template(["sh", "-c", command]), owner)
    [(event_id, token)] = relay.claim("create", 1)
    relay.execute(event_id, token)
    reaches(instance, "running")
    response, body = stream_get(  # ends by itself: the container runs on
        token_client(owner), f"/api/containers/{instance.pk}/logs/?follow=1&seconds=60&tail=10000"
    )
    assert response.status_code == 200, body
    text, _, note = body.decode().rpartition("\n[gobrave: ")
    assert note == "output cut at 1 MiB; ask again to go on]\n", body[-200:]
    assert len(text.encode()) == LOG_MAX_BYTES  # cut mid-line, before the note
    assert set(text.replace("\n", "")) == {"a"}
    assert dock.engine_state(instance)["Status"] == "running"


def test_a_template_no_runtime_matches_is_refused_at_request_time(dock, owner):
    template = dock.template(["sleep", "1"], constraints={"engine": "kubernetes"})
    with pytest.raises(NoMatchingRuntime, match="engine=kubernetes"):
        create(template, owner)
    assert not ContainerInstance.objects.exists()
    assert dock.containers() == []
