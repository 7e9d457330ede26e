"""A failed node's output is kept with the node before a cleanup policy removes its
container (docs/dags.md, "Configuration"); the API and the run's admin page show it.

The runner and the workers run in this process (``relay_drain``) on the fake engine,
whose containers all print its ``output`` file and exit with ``exit-on-start``.
"""

from __future__ import annotations

import pytest

from containers.engines import engine_for
from containers.engines.base import EngineError
from containers.engines.calls import OUTPUT_KEPT_BYTES
from containers.engines.fake import FakeEngine
from containers.models import ContainerInstance
from dags.models import DagNodeRun, DagRun
from dags.services import dag_node_output_keep, dag_run_start, dag_template_save
from tests.factories import TemplateFactory
from tests.processes import relay_drain

pytestmark = pytest.mark.django_db


@pytest.fixture
def engine(fake_runtime):
    return engine_for(fake_runtime)


def run_to_the_end(owner, nodes: list[dict]) -> DagRun:
    dag = dag_template_save(name="out", nodes=[{"template": "sleeper", **n} for n in nodes])
    run = dag_run_start(dag=dag, owner=owner, actor="test")
    relay_drain(rounds=40)
    run = DagRun.objects.get(pk=run.pk)
    assert run.status == "failed", run.reason
    return run


def node(run: DagRun, key: str) -> DagNodeRun:
    return DagNodeRun.objects.get(run=run, key=key)


def test_a_failed_node_s_output_is_kept_when_the_run_s_cleanup_deletes_its_container(
    owner, template, engine
):
    # The shipped policies: a failed node's container stopped, every container deleted
    # when the run ends.
    (engine.root / "exit-on-start").write_text("3")
    (engine.root / "output").write_text("copying...\nboom: disk full\n")
    run = run_to_the_end(owner, [{"key": "a"}])

    a = node(run, "a")
    assert (a.status, a.output_attempt) == ("failed", 1)
    assert a.output == "copying...\nboom: disk full\n"
    # ... and then its container was removed, as the policy says.
    instance = ContainerInstance.objects.filter(pk=a.instance_id).first()
    assert instance is None or instance.status == "deleted"
    assert engine.inspect(f"gb-{a.instance_id}") is None


def test_a_retried_node_keeps_the_output_of_its_latest_failed_attempt(
    owner, template, engine, gobrave_config
):
    gobrave_config(container={"dag_node_cleanup_on_failed": "delete"})
    (engine.root / "exit-on-start").write_text("3")
    (engine.root / "output").write_text("try failed\n")
    run = run_to_the_end(owner, [{"key": "a", "retries": 1}])

    a = node(run, "a")
    assert (a.status, a.attempt, a.output_attempt, a.output) == ("failed", 2, 2, "try failed\n")


def test_only_the_last_64_kib_of_a_long_output_are_kept(owner, template, engine):
    (engine.root / "exit-on-start").write_text("1")
    lines = [f"line {i:06d} " + "x" * 30 + "\n" for i in range(3000)]  # about 130 KB
    (engine.root / "output").write_text("".join(lines))
    run = run_to_the_end(owner, [{"key": "a"}])

    output = node(run, "a").output
    note, kept = output.split("\n", 1)
    assert note == "[gobrave: earlier output cut; the last 64 KiB kept]"
    assert len(kept.encode()) == OUTPUT_KEPT_BYTES
    assert kept.endswith(lines[-1]) and "line 002999" in kept and "line 000000" not in kept


def test_when_the_engine_cannot_give_the_output_a_note_is_kept_and_the_cleanup_goes_on(
    owner, template, engine, monkeypatch
):
    def refused(self, ref, tail=100):
        raise EngineError("logs refused")

    monkeypatch.setattr(FakeEngine, "logs", refused)
    (engine.root / "exit-on-start").write_text("3")
    run = run_to_the_end(owner, [{"key": "a"}])

    a = node(run, "a")
    assert a.output == (
        "[gobrave: output unavailable from runtime fake: EngineError: logs refused]\n"
    )
    assert engine.inspect(f"gb-{a.instance_id}") is None


# --- where it is shown ----------------------------------------------------------------


@pytest.fixture
def kept(owner, fake_runtime):
    """A run of alice's whose node ``a`` kept an output that prints a secret env value."""
    TemplateFactory(name="vault", env={"TOKEN": "hunter2-token"}, secret_env=["TOKEN"])
    dag = dag_template_save(name="kept", nodes=[{"key": "a", "template": "vault"}])
    run = dag_run_start(dag=dag, owner=owner, actor="test")
    dag_node_output_keep(
        run_id=run.pk, key="a", attempt=1, output="TOKEN=hunter2-token\nboom\n", actor="test"
    )
    return run


def test_the_api_shows_a_node_s_kept_output_scrubbed_for_a_user(alice, staff, kept):
    mine = alice.get(f"/api/dag-runs/{kept.pk}/").json()["nodes"][0]
    assert mine["output_attempt"] == 1
    assert "boom" in mine["output"] and "hunter2-token" not in mine["output"]
    seen = staff.get(f"/api/dag-runs/{kept.pk}/").json()["nodes"][0]
    assert seen["output"] == "TOKEN=hunter2-token\nboom\n"


def test_the_run_s_admin_page_shows_a_node_s_kept_output(client, staff_user, kept):
    client.force_login(staff_user)
    page = client.get(f"/admin/dags/dagrun/{kept.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="gb-outputs"' in text and "TOKEN=hunter2-token\nboom" in text
