"""The layout's import rules (``[tool.importlinter]`` in pyproject.toml) hold: apps stand on
each other in one direction (``gobrave`` → ``dags`` → ``containers`` → ``webhooks`` →
``outbox``/``tenants`` → ``core``), and inside ``containers`` every arrow points down its layers.

import-linter runs in a process of its own: its command line reconfigures logging (it
would disable every logger this process already made).
"""

from __future__ import annotations

import subprocess
import sys

from tests.processes import REPO


def test_import_contracts_are_kept():
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
         "--no-cache"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout
