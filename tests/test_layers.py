"""The layout's import rules (``[tool.importlinter]`` in pyproject.toml) hold: apps stand on
each other in one direction (``gobrave`` → ``dags`` → ``containers`` → ``outbox``/``tenants``
→ ``core``), and inside ``containers`` every arrow points down its layers."""

from __future__ import annotations

import os

from importlinter.cli import lint_imports

from tests.processes import REPO


def test_import_contracts_are_kept(capsys):
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        code = lint_imports(
            config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True
        )
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 broken" in out, out
