"""The operator console in a real browser, against a live server.

``test_dashboard_and_changelist_in_the_browser`` needs only the fake engine and no worker
processes: it proves the browser harness itself. ``test_operator_runs_an_instance_...``
drives the whole product: the dispatcher, both django-q2 clusters and the monitor (when
it exists) run as processes on the live server's database, on the fake engine and on the
real Docker engine. Screenshots land in test-artifacts/<test name>/.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from django.db import close_old_connections
from django.utils import timezone

from containers.models import ContainerEvent, ContainerInstance, Runtime, Workspace
from containers.queues import event_kind_display
from containers.requests.services import container_create_by_template
from containers.states import Status
from core.models import Counter
from tests.admin.conftest import make_user, unavailable
from tests.factories import InstanceFactory, TemplateFactory
from tests.processes import running_app, wait_for

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
]

REPO = Path(__file__).resolve().parents[2]
DOCKER_URL = "unix:///var/run/docker.sock"
TEST_IMAGE = "gobrave-test-busybox:latest"
UUID = re.compile(r"/containerinstance/([0-9a-f-]{36})/change/")
PROCESS_CONFIG = {
    "outbox_poll_interval": "0.2",
    "queue_poll": "0.05",
    "container_stop_timeout": "2",  # busybox sleep ignores SIGTERM: do not wait 10 s
}


def number(page, card: str) -> str:
    return page.locator(f"#{card} .gb-num").get_attribute("data-value")


def total(page, series: str) -> str:
    return page.locator(f"#gb-total-{series} strong").get_attribute("data-value")


def dashboard_settled(page, dashboard: str, *, accepted: int) -> None:
    """The dashboard counts ``accepted`` creates, none failed, nothing pending or active."""
    page.goto(dashboard)
    assert int(total(page, "accepted")) == accepted
    assert number(page, "gb-pending") == "0"
    assert number(page, "gb-active") == "0"
    assert total(page, "failed") == "0"


def shows_without_reload(page, status: str, *, timeout: float) -> None:
    """Wait until the page shows ``status`` by itself (live updates), never reloading it."""
    page.evaluate("window.gbNotReloaded = true")
    badge = "document.querySelector('.field-status_display .gb-badge')"
    page.wait_for_function(f"{badge}.textContent.trim() === '{status}'", timeout=timeout * 1000)
    assert page.evaluate("window.gbNotReloaded === true"), "the page was reloaded"


# --- the harness, with the fake engine only --------------------------------------------------


def test_dashboard_and_changelist_in_the_browser(
    live_server, page, admin_login, fake_runtime, template
):
    root = make_user("root", superuser=True)
    InstanceFactory(name="web-run", status=Status.RUNNING, template=template, runtime=fake_runtime)
    InstanceFactory(
        name="web-failed", status=Status.FAILED, template=template, runtime=fake_runtime
    )
    Counter.objects.create(
        minute=timezone.now().replace(second=0, microsecond=0), name="create_accepted", count=4
    )
    admin_login(page, root)
    page.shots("index")

    page.click("#gobrave-dashboard-link")
    page.wait_for_selector("#gb-dashboard")
    assert number(page, "gb-pending") == "0"
    assert total(page, "accepted") == "4"
    assert page.locator("#gb-chart svg rect").count() == 36
    page.shots("dashboard-empty")

    # A create made elsewhere shows up without a reload: the page refreshes itself.
    container_create_by_template(template=template, owner=root, actor="test")
    close_old_connections()
    page.wait_for_function(
        "document.querySelector('#gb-pending .gb-num').dataset.value === '1'", timeout=15_000
    )
    assert total(page, "accepted") == "5"
    page.shots("dashboard-refreshed")

    page.goto(f"{live_server.url}/admin/containers/containerinstance/")
    assert page.locator("span.gb-badge").count() == 3
    row = page.locator("#result_list tr", has_text="web-run")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "stop_instances")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    assert "Stop requested for 1 instance: web-run." in page.locator(".messagelist").text_content()
    assert "stop_pending" in page.locator("#result_list tr", has_text="web-run").inner_text()
    # The row follows the instance without a reload (the worker's part, played here).
    page.evaluate("window.gbNotReloaded = true")
    stopped = ContainerInstance.objects.filter(name="web-run")
    stopped.update(status=Status.STOPPED, exit_code=3, status_reason="exited with 3")
    close_old_connections()
    page.wait_for_function(
        """() => Array.from(document.querySelectorAll('#result_list tr')).some(
             tr => tr.textContent.includes('web-run')
               && tr.querySelector('.gb-status').textContent.includes('exit 3: exited with 3'))"""
    )
    assert page.evaluate("window.gbNotReloaded === true"), "the list was reloaded"
    # The list fits the operator's 1366 px screen: no sideways scrolling.
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1366, f"the changelist is {width} px wide"
    page.shots("changelist-after-stop")

    page.locator("#changelist-filter a", has_text="failed").first.click()
    page.wait_for_url(re.compile(r"status__exact=failed"))
    assert page.locator("#result_list tbody tr").count() == 1
    page.shots("changelist-filtered")


FITS = """() => {
  const box = document.querySelector('#changelist .results') || document.body;
  return {page: document.documentElement.scrollWidth, over: box.scrollWidth - box.clientWidth};
}"""


def test_every_list_fits_at_1366_px(live_server, page, admin_login, fake_runtime, template):
    """No changelist scrolls sideways on a 1366 px screen, with long values in its cells."""
    from containers.models import OrphanContainer
    from outbox.models import OutboxEvent, OutboxStatus

    root = make_user("root", superuser=True)
    long_words = "a-rather-long-name-that-someone-typed-" * 3
    instance = InstanceFactory(
        name=long_words[:60], status=Status.FAILED, template=template, runtime=fake_runtime
    )
    TemplateFactory(name=long_words[:60], image=f"registry.example.com/{long_words}:1.2.3")
    Runtime.objects.create(
        name=long_words[:60],
        driver="docker",
        base_url=f"tcp://{long_words}.example.com:2376",
        labels={"engine": "docker", "zone": long_words, "disk": "ssd"},
        enabled=False,
    )
    ContainerEvent.objects.create(
        instance_id=instance.id,
        instance_name=instance.name,
        kind="dead_letter",
        actor="worker",
        from_status="creating",
        to_status="failed",
        message="ContainerCreateRequest failed: " + "engine said no because " * 20,
    )
    OutboxEvent.objects.create(
        kind="ContainerCreateRequest",
        queue="create",
        aggregate_id=str(instance.id),
        status=OutboxStatus.DEAD,
        available_at=timezone.now(),
        attempts=5,
        last_error="Traceback (most recent call last):\n" + "  File x, line 1, in y\n" * 30,
    )
    OrphanContainer.objects.create(
        runtime=fake_runtime, container_id="f" * 64, name=f"/gb-{long_words}", status="exited"
    )
    Workspace.objects.create(
        runtime=fake_runtime, owner=root, kind="volume", source=f"gb-ws-{long_words}", uid=1, gid=1
    )
    admin_login(page, root)
    lists = [
        "containers/containerinstance",
        "containers/containertemplate",
        "containers/runtime",
        "containers/containerevent",
        "containers/orphancontainer",
        "containers/workspace",
        "outbox/outboxevent",
        "dags/dagtemplate",
        "dags/dagrun",
        "dags/dagevent",
        "tenants/userquota",
    ]
    widths = {}
    for path in lists:
        page.goto(f"{live_server.url}/admin/{path}/")
        page.wait_for_selector("#changelist")
        # Neither the page nor the table's own box (.results scrolls sideways) overflows.
        widths[path] = page.evaluate(FITS)
        page.shots(path.replace("/", "-"))
    wide = {path: size for path, size in widths.items() if size["page"] > 1366 or size["over"] > 0}
    assert wide == {}, widths


def test_the_index_is_an_operators_home(live_server, page, admin_login, fake_runtime, template):
    """The console box reads in lines, not one letter per line; a count leads to its list."""
    root = make_user("root", superuser=True)
    InstanceFactory(status=Status.FAILED, template=template, runtime=fake_runtime)
    admin_login(page, root)
    link = page.locator("#gobrave-dashboard-link").bounding_box()
    assert link["width"] > link["height"] * 3, f"the console box is squeezed: {link}"
    assert page.locator("#gb-home-failed .gb-num").text_content().strip() == "1"
    assert page.locator("link[rel=icon]").count() == 1
    page.shots("index")
    page.click("#gb-home-failed")
    page.wait_for_url(re.compile(r"changed=1h"))
    assert page.locator("#result_list tbody tr").count() == 1


OVERLAPS = """(selectors) => {
  const boxes = [];
  for (const sel of selectors) {
    for (const el of document.querySelectorAll(sel)) {
      const r = el.getBoundingClientRect();
      if (r.width && r.height) boxes.push({sel, x: r.x, y: r.y, r: r.right, b: r.bottom});
    }
  }
  const hits = [];
  for (const button of document.querySelectorAll('.object-tools button, .object-tools a')) {
    const a = button.getBoundingClientRect();
    for (const o of boxes) {
      if (a.x < o.r && o.x < a.right && a.y < o.b && o.y < a.bottom) {
        hits.push(`${button.textContent.trim()} over ${o.sel}`);
      }
    }
  }
  return hits;
}"""


@pytest.mark.parametrize("status", ["running", "failed"])
def test_the_dag_run_page_s_buttons_stand_clear_of_its_tables_and_kinds_read_as_words(
    live_server, page, admin_login, fake_runtime, template, status
):
    from dags.models import DagEvent, DagRun
    from dags.services import dag_run_start, dag_template_save

    root = make_user("root", superuser=True)
    nodes = [{"key": "a", "template": "sleeper"}, {"key": "b", "template": "sleeper"}]
    dag = dag_template_save(name="pair", nodes=nodes)
    run = dag_run_start(dag=dag, owner=root, actor="test")
    DagRun.objects.filter(pk=run.pk).update(status=status)
    close_old_connections()
    admin_login(page, root)
    page.goto(f"{live_server.url}/admin/dags/dagrun/{run.pk}/change/")
    button = "#gb-cancel" if status == "running" else "#gb-retry"
    page.wait_for_selector(button)
    hits = page.evaluate(
        OVERLAPS, ["#content-main fieldset", "#gb-graph-module", "#gb-events table", "h1"]
    )
    page.shots(f"dagrun-{status}")
    assert hits == [], hits
    # Each module starts below the one before it (none drawn behind the floated form).
    tops = page.evaluate(
        "() => ['#gb-graph-module', '#content-main fieldset', '#gb-events']"
        ".map(s => document.querySelector(s).getBoundingClientRect().top)"
    )
    assert tops == sorted(tops) and len(set(tops)) == 3, tops
    kinds = page.locator("#gb-events tbody td.gb-kind").all_text_contents()
    stored = list(DagEvent.objects.filter(run_id=run.pk).values_list("kind", flat=True))
    assert kinds and not any("_" in k or k[:1].isupper() for k in kinds), (kinds, stored)


def test_the_instance_add_form_takes_env_rows_and_shows_the_policy_s_refusal(
    live_server, page, admin_login, fake_runtime, template
):
    template.user_env = ["MODE"]
    template.save(update_fields=["user_env"])
    root = make_user("root", superuser=True)
    admin_login(page, root)
    page.goto(f"{live_server.url}/admin/containers/containerinstance/add/")
    page.select_option("#id_template", str(template.pk))
    page.fill("#id_name", "with-env")
    page.locator("input[name=env-name]").first.fill("SECRET")
    page.locator("input[name=env-value]").first.fill("x")
    page.click("input[name=_save]")
    page.wait_for_selector(".field-env .errorlist")
    error = page.locator(".field-env .errorlist").text_content()
    assert "does not let users set SECRET" in error, error
    page.shots("add-form-refused")
    assert not ContainerInstance.objects.exists()
    page.locator("input[name=env-name]").first.fill("MODE")
    page.locator("input[name=env-value]").first.fill("debug")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist")
    close_old_connections()
    made = ContainerInstance.objects.get(name="with-env")
    assert made.spec["env"]["MODE"] == "debug", made.spec["env"]


# --- the whole product -----------------------------------------------------------------------


def _docker_runtime() -> Runtime:
    from containers.engines.docker import DockerEngine

    engine = DockerEngine(DOCKER_URL, timeout=10)
    if not engine.ping():
        unavailable("no Docker engine: run scripts/test-engine.sh")
    try:
        present = engine.image_present(TEST_IMAGE)
    except Exception:  # an engine that half-answers is no engine
        present = False
    if not present:
        unavailable(f"no {TEST_IMAGE} image: run scripts/test-engine.sh")
    runtime, _ = Runtime.objects.update_or_create(
        name="browser-docker",
        defaults={
            "driver": Runtime.Driver.DOCKER,
            "base_url": DOCKER_URL,
            "labels": {"engine": "docker-browser"},
            "enabled": True,
        },
    )
    return runtime


def _remove_leftovers(runtime: Runtime, names: list[str]) -> None:
    from containers.engines import engine_for

    engine = engine_for(runtime)
    for name in names:
        with contextlib.suppress(Exception):  # best effort after a failed test
            engine.remove(name)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["fake", pytest.param("docker", marks=pytest.mark.docker)])
def test_operator_runs_an_instance_through_its_life(
    engine, live_server, page, admin_login, tmp_path, request
):
    if engine == "docker":
        runtime = _docker_runtime()
        constraints = {"engine": "docker-browser"}
    else:
        runtime = request.getfixturevalue("fake_runtime")
        constraints = {"engine": "fake"}
    template = TemplateFactory(
        name=f"browser-{engine}",
        image=TEST_IMAGE,
        # A line a second, so the page can be seen following the output.
        command=["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"],
        pull_policy="never",
        constraints=constraints,
    )
    root = make_user("root", superuser=True)
    created: list[str] = []
    with running_app(tmp_path, **PROCESS_CONFIG) as app:
        app.dispatcher()
        app.cluster("create")
        app.cluster("control")
        if (REPO / "containers/management/commands/run_monitor.py").exists():
            app.start("monitor", "run_monitor")
        try:
            _run_the_flow(page, live_server, admin_login, root, template, created)
        finally:
            if engine == "docker":
                _remove_leftovers(runtime, created)
        for name, process in app.processes.items():
            assert process.poll() is None, f"{name} died:\n{app.logs()}"


def _run_the_flow(page, live_server, admin_login, root, template, created) -> None:
    base = f"{live_server.url}/admin"
    dashboard = f"{base}/containers/containerinstance/dashboard/"
    admin_login(page, root)

    # 1. The dashboard before anything happens.
    page.goto(dashboard)
    accepted_before = int(total(page, "accepted"))
    assert number(page, "gb-pending") == "0"
    assert number(page, "gb-active") == "0"
    page.shots("dashboard-before")

    # 2. Create an instance from the template, through the add form.
    page.goto(f"{base}/containers/containerinstance/add/")
    page.select_option("#id_template", label=template.name)
    page.fill("#id_name", f"{template.name}-1")
    page.shots("add-form")
    page.click("input[name=_continue]")
    page.wait_for_url(UUID)
    instance_id = UUID.search(page.url).group(1)
    created.append(f"gb-{instance_id}")
    assert "queued" in page.locator(".messagelist").text_content()
    page.shots("created")

    # 3. Watch it reach running (dispatcher → create cluster → engine) without a reload:
    #    status, history and buttons follow by themselves.
    shows_without_reload(page, "running", timeout=120)
    page.wait_for_function(
        "document.querySelector('#gb-events tbody').textContent.includes('running')"
    )
    assert page.locator("#gb-logs").is_visible()
    # The page follows its state and the container's output (its stream of server-sent
    # events, <id>/stream/).
    page.wait_for_selector("html[data-gb-stream=open]", state="attached")
    if "docker" in template.name:
        page.wait_for_function(
            "/tick [0-9]+/.test(document.getElementById('gb-log-text').textContent)"
        )
        first = int(re.findall(r"tick (\d+)", page.locator("#gb-log-text").text_content())[-1])
        page.wait_for_function(
            f"""() => {{ const n = [...document.getElementById('gb-log-text').textContent
                         .matchAll(/tick (\\d+)/g)].map(m => +m[1]);
                         return n.length && n[n.length - 1] >= {first + 2}; }}"""
        )
        assert page.evaluate("window.gbNotReloaded === true"), "the page was reloaded"
    assert page.locator("#gb-stop").is_visible() and page.locator("#gb-start").is_hidden()
    page.shots("running")

    # 4. The dashboard followed: one more accepted, nothing pending or active.
    dashboard_settled(page, dashboard, accepted=accepted_before + 1)
    page.shots("dashboard-running")

    # 5. Stop it from its page.
    page.goto(f"{base}/containers/containerinstance/{instance_id}/change/")
    page.click("#gb-stop")
    page.wait_for_selector(".messagelist")
    assert "Stop requested" in page.locator(".messagelist").text_content()
    shows_without_reload(page, "stopped", timeout=60)
    page.wait_for_selector("#gb-start:not([hidden])")
    assert page.locator("#gb-stop").is_hidden()
    page.shots("stopped")

    # 6. Delete it, after a page that says what will be removed: the row goes, its history stays.
    page.click("#gb-delete")
    page.wait_for_selector("#gb-delete-list")
    assert f"gb-{instance_id}" in page.locator("#gb-delete-list").inner_text()
    page.shots("delete-confirmation")
    page.click("#gb-confirm-delete")
    page.wait_for_selector(".messagelist")
    assert "Delete requested" in page.locator(".messagelist").text_content()
    page.shots("delete-requested")
    wait_for(
        lambda: close_old_connections() or not ContainerInstance.objects.filter(id=instance_id),
        timeout=60,
        interval=0.3,
        message="the instance row to be deleted",
    )
    assert ContainerEvent.objects.filter(instance_id=instance_id, kind="ContainerDeleted")
    page.goto(f"{base}/containers/containerevent/?instance_id={instance_id}")
    assert event_kind_display("ContainerDeleted") in page.locator("#result_list").inner_text()
    page.shots("history")

    # 7. The dashboard after: the create counted once, nothing left in flight.
    dashboard_settled(page, dashboard, accepted=accepted_before + 1)
    page.shots("dashboard-after")


# --- template editing ----------------------------------------------------------------------


def _env_row(page, index: int):
    return page.locator(".field-env table.gb-rows tbody tr").nth(index)


@pytest.mark.docker
def test_template_env_and_volumes_are_edited_as_rows(
    live_server, page, admin_login, browser, gobrave_config
):
    """Rows are added in the page (rows.js, a local file), saved and kept; a bad name is
    refused on its field and changes nothing; without JavaScript the spare rows still work.
    The image is checked on the real engine at save (pull policy never)."""
    from containers.models import ContainerTemplate

    gobrave_config(container={"allowed_volume_roots": ["/srv"]})
    _docker_runtime()
    root = make_user("root", superuser=True)
    admin_login(page, root)
    base = f"{live_server.url}/admin/containers/containertemplate"
    page.goto(f"{base}/add/")
    page.fill("#id_name", "rows")
    page.fill("#id_image", TEST_IMAGE)
    page.select_option("#id_pull_policy", "never")
    page.fill("#id_command", "sleep 600")
    page.fill("#id_constraints", '{"engine": "docker-browser"}')
    assert page.locator(".field-env tbody tr").count() == 1  # one empty row to type into
    _env_row(page, 0).locator("input[name=env-name]").fill("MODE")
    _env_row(page, 0).locator("input[name=env-value]").fill("debug")
    page.click(".field-env .gb-rows-add")
    _env_row(page, 1).locator("input[name=env-name]").fill("GREETING")
    _env_row(page, 1).locator("input[name=env-value]").fill("hello world")
    volume = page.locator(".field-volumes tbody tr").first
    volume.locator("input[name=volumes-source]").fill("$WORKSPACE_PATH")
    volume.locator("input[name=volumes-target]").fill("/work")
    volume.locator("select[name=volumes-mode]").select_option("ro")
    page.shots("rows-typed")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist")
    template = ContainerTemplate.objects.get(name="rows")
    assert template.env == {"MODE": "debug", "GREETING": "hello world"}
    assert template.volumes == [{"source": "$WORKSPACE_PATH", "target": "/work", "read_only": True}]
    assert template.image_status == "present", template.image_status  # asked the engine
    assert page.locator(".field-env tbody tr").count() == 2  # drawn again as rows
    page.shots("rows-saved")

    # A bad name: refused on the field with the rule's message; the template keeps its env.
    page.click(".field-env .gb-rows-add")
    _env_row(page, 2).locator("input[name=env-name]").fill("1BAD")
    _env_row(page, 2).locator("input[name=env-value]").fill("x")
    page.click("input[name=_continue]")
    page.wait_for_selector(".field-env .errorlist")
    assert (
        "env: '1BAD' is not a valid variable name"
        in page.locator(".field-env .errorlist").inner_text()
    )
    assert _env_row(page, 2).locator("input[name=env-name]").input_value() == "1BAD"
    template.refresh_from_db()
    assert template.env == {"MODE": "debug", "GREETING": "hello world"}
    page.shots("bad-name-refused")

    # Its row removed in the page, the form saves again.
    _env_row(page, 2).locator(".gb-rows-remove").click()
    assert page.locator(".field-env tbody tr").count() == 2
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")

    # Without JavaScript: no buttons, spare empty rows to fill, and the same form saves.
    context = browser.new_context(
        java_script_enabled=False, viewport={"width": 1366, "height": 900}
    )
    try:
        plain = context.new_page()
        admin_login(plain, root)
        plain.goto(f"{base}/{template.pk}/change/")
        assert plain.locator(".field-env .gb-rows-add").is_hidden()
        rows = plain.locator(".field-env tbody tr")
        assert rows.count() == 2 + 2  # the two variables and two spare rows
        rows.nth(2).locator("input[name=env-name]").fill("EXTRA")
        rows.nth(2).locator("input[name=env-value]").fill("1")
        plain.click("input[name=_continue]")
        plain.wait_for_selector(".messagelist .success")
        template.refresh_from_db()
        assert template.env == {"MODE": "debug", "GREETING": "hello world", "EXTRA": "1"}
    finally:
        context.close()

    # Under pull policy never, an image the engine lacks is a warning at save; the action
    # asks the engine again now.
    page.goto(f"{base}/{template.pk}/change/")
    page.fill("#id_image", "gobrave-test-no-such-image:1")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .warning")
    assert "pull policy is never" in page.locator(".messagelist .warning").inner_text()
    template.refresh_from_db()
    assert template.image_status == "missing", template.image_status
    ContainerTemplate.objects.filter(pk=template.pk).update(image=TEST_IMAGE)  # pulled since
    page.goto(f"{base}/")
    page.check(f"input[name=_selected_action][value='{template.pk}']")
    page.select_option("select[name=action]", "refresh_image_status")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    assert "Image status — present: rows." in page.locator(".messagelist").inner_text()
    template.refresh_from_db()
    assert template.image_status == "present", template.image_status
    page.shots("image-refreshed")


# --- the README's quick tour ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.docker
def test_the_readme_quick_tour_on_the_real_engine(live_server, page, admin_login, tmp_path):
    """Steps 2 to 6 of the README's quick tour as written, on the Docker engine of this
    machine: the `local` runtime, a template typed as the tour says (`sleep 600`, the
    constraint, a workspace volume row), an instance added from it reaching running in the
    list by itself, then `container_stop` / `container_delete ID --wait` by its short id."""
    import docker

    from containers.engines.labels import LABEL_INSTALLATION
    from containers.installation import installation_id
    from containers.models import ContainerTemplate

    _docker_runtime()  # skips (fails in CI) without the engine and its test image
    Runtime.objects.exclude(name="local").delete()
    # What migrate makes: the Docker Engine of this machine (a flushed test database lost it).
    Runtime.objects.update_or_create(
        name="local",
        defaults={"driver": "docker", "base_url": DOCKER_URL, "labels": {"engine": "docker"}},
    )
    installation = installation_id()
    root = make_user("root", superuser=True)
    base = f"{live_server.url}/admin"
    sdk = docker.APIClient(base_url=DOCKER_URL, version="auto", timeout=30)
    try:
        with running_app(tmp_path, **PROCESS_CONFIG) as app:
            app.dispatcher()
            app.cluster("create")
            app.cluster("control")
            app.monitor()

            # 2. "/" leads to the admin.
            page.goto(f"{live_server.url}/")
            page.wait_for_selector("#id_username")
            admin_login(page, root)

            # 3. A template: an image the engine has, `sleep 600`, {"engine": "docker"}, and
            #    a volume row with the source $WORKSPACE_PATH and the target /work.
            page.goto(f"{base}/containers/containertemplate/add/")
            page.fill("#id_name", "tour")
            page.fill("#id_image", TEST_IMAGE)
            page.fill("#id_command", "sleep 600")
            page.fill("#id_constraints", '{"engine": "docker"}')
            volume = page.locator(".field-volumes tbody tr").first
            volume.locator("input[name=volumes-source]").fill("$WORKSPACE_PATH")
            volume.locator("input[name=volumes-target]").fill("/work")
            page.click("input[name=_save]")
            page.wait_for_selector(".messagelist .success")
            assert ContainerTemplate.objects.get(name="tour").volumes == [
                {"source": "$WORKSPACE_PATH", "target": "/work", "read_only": False}
            ]

            # 4. An instance from it, through the add form.
            page.goto(f"{base}/containers/containerinstance/add/")
            page.select_option("#id_template", label="tour")
            page.select_option("#id_owner", label="root")
            page.click("input[name=_save]")
            page.wait_for_selector(".messagelist")

            # 5. It goes pending → creating → running in the list, which updates by itself.
            page.evaluate("window.gbNotReloaded = true")
            page.wait_for_function(
                """() => Array.from(document.querySelectorAll('#result_list tbody tr')).some(
                     tr => tr.querySelector('.gb-status')
                       && tr.querySelector('.gb-status').textContent.includes('running'))""",
                timeout=120_000,
            )
            assert page.evaluate("window.gbNotReloaded === true"), "the list was reloaded"
            page.shots("tour-running")
            instance = ContainerInstance.objects.get(template__name="tour")
            short = page.locator("#result_list td.field-short_id code").first.inner_text()
            assert str(instance.id).startswith(short)
            [held] = sdk.containers(filters={"name": f"^/gb-{instance.id}$"})
            assert held["Id"] == instance.container_id
            assert held["Mounts"][0]["Destination"] == "/work"  # the owner's workspace

            stopped = app.manage("container_stop", short, "--wait", timeout=120)
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
            assert "stopped" in stopped.stdout, stopped.stdout
            deleted = app.manage("container_delete", short, "--wait", timeout=120)
            assert deleted.returncode == 0, deleted.stdout + deleted.stderr
            assert not ContainerInstance.objects.filter(pk=instance.pk).exists()
            assert sdk.containers(all=True, filters={"name": f"^/gb-{instance.id}$"}) == []

            # 6. The queue dashboard, linked from the admin index.
            page.goto(f"{base}/")
            page.click("#gobrave-dashboard-link")
            page.wait_for_selector("#gb-dashboard")
            assert number(page, "gb-pending") == "0"
    finally:
        label = f"{LABEL_INSTALLATION}={installation}"
        for container in sdk.containers(all=True, filters={"label": label}):
            sdk.remove_container(container["Id"], force=True)
        for volume in sdk.volumes(filters={"label": label}).get("Volumes") or []:
            sdk.remove_volume(volume["Name"], force=True)
        sdk.close()
