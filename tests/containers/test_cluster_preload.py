"""A cluster that runs requests imports the Docker driver in its main process, before its
workers fork from it: no worker pays the import on its first request.

Each case starts a fresh interpreter (what it has imported is the point) that sets up
Django as ``manage.py qcluster`` does, with the cluster's name in ``Q_CLUSTER_NAME``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.processes import REPO

PROBE = (
    "import django, sys; django.setup(); "
    "print(sorted(m for m in ('containers.engines.docker', 'cryptography.x509') "
    "if m in sys.modules))"
)


def _imported_after_setup(cluster: str) -> str:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gobrave.settings_test"}
    env.pop("Q_CLUSTER_NAME", None)
    if cluster:
        env["Q_CLUSTER_NAME"] = cluster
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("cluster", ["create", "control"])
def test_a_request_clusters_main_process_has_the_docker_driver_before_it_forks(cluster):
    assert _imported_after_setup(cluster) == "['containers.engines.docker', 'cryptography.x509']"


@pytest.mark.parametrize("cluster", ["", "webhooks"])
def test_other_processes_load_the_driver_only_when_they_use_it(cluster):
    assert _imported_after_setup(cluster) == "[]"
