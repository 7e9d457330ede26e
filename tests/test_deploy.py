"""What ``deploy/`` ships for monitoring is valid and reads metrics ``/metrics`` has."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.processes import REPO
from tests.promtool import promtool

DASHBOARD = REPO / "deploy" / "grafana" / "gobrave-dashboard.json"
RULES = REPO / "deploy" / "prometheus" / "gobrave-rules.yml"
NAME = re.compile(r"\bgobrave_[a-z_]+")
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def _exposed(client) -> set[str]:
    text = client.get("/metrics").content.decode()
    return {family.name for family in text_string_to_metric_families(text)}


def _family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def test_promtool_accepts_the_alert_rules():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 rules found" in done.stdout


def test_alerts_cover_dead_letters_unreachable_engines_and_a_full_queue():
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    alerts = {rule["alert"] for rule in rules}
    assert alerts == {"GobraveDeadLettersRising", "GobraveEngineUnreachable", "GobraveQueueFull"}


@pytest.mark.django_db
def test_dashboard_and_rules_read_only_metrics_that_exist(client, fake_runtime):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"]
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [rule["expr"] for group in yaml.safe_load(RULES.read_text())["groups"]
              for rule in group["rules"]]  # fmt: skip
    used = {_family(name) for expr in exprs for name in NAME.findall(expr)}
    assert used - _exposed(client) == set()
