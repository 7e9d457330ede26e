"""A newcomer's first run: the README's ``make run`` in a fresh clone, then the admin.

The clone is of the repository's committed HEAD; its ``make run`` makes its own venv
and SQLite database, serves on a free port (``GOBRAVE_WEB_ADDR``) and is pointed at an
engine socket that does not exist, so it never touches the shared Docker engine (the
README promises the app works without one). Screenshots land in test-artifacts/.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.admin.conftest import unavailable
from tests.processes import free_port, http_answers, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "first-run-pass-1"
# base.css sets these on #header; an unstyled page has display:block and no background.
STYLED_HEADER = {"display": "flex", "background": "rgb(65, 118, 144)"}
HEADER_STYLE = """() => {
  const style = getComputedStyle(document.querySelector('#header'));
  return {display: style.display, background: style.backgroundColor};
}"""


@contextlib.contextmanager
def _make_run(clone: Path, env: dict[str, str], log: Path):
    """``make run`` in ``clone``; on exit SIGTERM to its process group, SIGKILL if it lingers."""
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["make", "run"],
            cwd=clone,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture
def fresh_clone(tmp_path) -> Path:
    if shutil.which("make") is None or shutil.which("git") is None:
        unavailable("make and git are needed to run the README's first run")
    clone = tmp_path / "gobrave"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)],
        check=True,
        timeout=60,
    )
    return clone


@pytest.mark.timeout(600)
def test_make_run_in_a_fresh_clone_serves_a_styled_admin(fresh_clone, tmp_path, page):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOBRAVE_", "DJANGO_", "DATABASE_", "VIRTUAL_ENV", "MAKE"))
    }
    env.update(
        GOBRAVE_WEB_ADDR=f"127.0.0.1:{port}",
        DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock",
        PYTHONUNBUFFERED="1",
    )
    log = tmp_path / "make-run.log"
    with _make_run(fresh_clone, env, log) as process:
        try:
            wait_for(
                lambda: process.poll() is not None or http_answers(f"{base}/admin/login/"),
                timeout=400,
                interval=0.5,
                message="make run to serve the admin",
            )
            assert process.poll() is None, "make run exited"

            # The quick tour's first step: a superuser.
            subprocess.run(
                [".venv/bin/python", "manage.py", "createsuperuser", "--no-input"],
                cwd=fresh_clone,
                env={
                    **env,
                    "DJANGO_SUPERUSER_USERNAME": "admin",
                    "DJANGO_SUPERUSER_EMAIL": "admin@example.com",
                    "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
                },
                check=True,
                capture_output=True,
                timeout=60,
            )

            # "/" leads to the admin, whose stylesheet loaded (the page refuses off-site URLs).
            page.goto(f"{base}/")
            page.wait_for_selector("#id_username")
            assert page.url == f"{base}/admin/login/?next=/admin/"
            assert page.evaluate(HEADER_STYLE) == STYLED_HEADER
            page.shots("login")
            page.fill("#id_username", "admin")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url(f"{base}/admin/")
            assert page.evaluate(HEADER_STYLE) == STYLED_HEADER
            assert page.locator("#gobrave-dashboard-link").is_visible()
            page.shots("admin-index")

            # /api/ lists the endpoints; the API docs render from local files.
            request = urllib.request.Request(f"{base}/api/", headers={"Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as response:
                index = json.load(response)
            assert index["containers"]["url"] == f"{base}/api/containers/", index
            assert {"templates", "queue", "docs", "schema"} <= set(index), index
            page.goto(f"{base}/api/docs/")
            page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
            assert "gobrave API" in page.locator(".swagger-ui .info .title").inner_text()
            page.shots("api-docs")
        except BaseException:
            print(log.read_text(errors="replace")[-6000:])
            raise

    # A second run installs nothing while pyproject.toml is unchanged, and again after it changed.
    def planned() -> str:
        result = subprocess.run(
            ["make", "-n", "run"], cwd=fresh_clone, env=env, capture_output=True, text=True
        )
        return result.stdout

    assert "pip install" not in planned()
    (fresh_clone / "pyproject.toml").touch()
    assert "pip install -q -e" in planned()
