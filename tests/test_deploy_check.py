"""HTTPS is set from the environment: with the variables docs/operations.md names,
``manage.py check --deploy`` reports nothing; without them it says what is missing."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys

from tests.processes import REPO


def _documented_environment() -> dict[str, str]:
    """The ``/etc/gobrave/env`` block of docs/operations.md, as a mapping."""
    text = (REPO / "docs" / "operations.md").read_text()
    block = re.search(r"```sh\n# /etc/gobrave/env\b.*?\n(.*?)```", text, re.S).group(1)
    lines = (line.strip() for line in block.splitlines())
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def _check_deploy(tmp_path, **environ: str) -> subprocess.CompletedProcess:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "GOBRAVE_")) and key != "DATABASE_URL"
    }
    env.update(
        DJANGO_SETTINGS_MODULE="gobrave.settings",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        GOBRAVE_SQLITE_PATH=str(tmp_path / "db.sqlite3"),
        **environ,
    )
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_check_deploy_reports_nothing_with_the_documented_https_variables(tmp_path):
    environ = _documented_environment()
    assert "DJANGO_SECURE_PROXY_SSL_HEADER" in environ
    done = _check_deploy(tmp_path, **environ)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


def test_check_deploy_names_what_is_missing_without_them(tmp_path):
    done = _check_deploy(tmp_path)
    assert done.returncode != 0
    found = {code for code in ("W004", "W008", "W012", "W016") if f"security.{code}" in done.stderr}
    assert found == {"W004", "W008", "W012", "W016"}, done.stderr
    assert "drf_spectacular" not in done.stderr  # only the HTTPS settings are missing
