"""What ``make run`` (scripts/run_all.py) and the deploy files start."""

from __future__ import annotations

import importlib.util
import shlex

import pytest

from tests.processes import REPO


def _run_all():
    spec = importlib.util.spec_from_file_location("run_all", REPO / "scripts" / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _control_socket(argv: list[str]) -> str:
    assert "--control-socket" in argv, argv
    return argv[argv.index("--control-socket") + 1]


def test_make_runs_gunicorn_with_a_control_socket_of_its_own_installation():
    """gunicorn's default control socket is one per user ($HOME/.gunicorn/gunicorn.ctl):
    two installations on one host would take each other's."""
    run_all = _run_all()
    web, _env = run_all.parts()["web"]
    assert _control_socket(web) == str(REPO / "var" / "gunicorn.ctl")


@pytest.mark.parametrize("path", ["deploy/Procfile", "deploy/systemd/gobrave-web.service"])
def test_the_deploy_files_give_gunicorn_the_installations_control_socket(path):
    line = next(
        line for line in (REPO / path).read_text().splitlines() if "gunicorn gobrave" in line
    )
    assert _control_socket(shlex.split(line)) == "var/gunicorn.ctl"


def _server(argv: list[str]) -> tuple[str, str]:
    """(application, worker class) of a gunicorn command line."""
    app = next(arg for arg in argv if arg.startswith("gobrave."))
    flag = "--worker-class" if "--worker-class" in argv else "-k"
    assert flag in argv, argv
    return app, argv[argv.index(flag) + 1]


@pytest.mark.parametrize("path", ["deploy/Procfile", "deploy/systemd/gobrave-web.service"])
def test_make_run_and_the_deploy_files_serve_the_same_asgi_application(path):
    """Streams hold no thread only under the ASGI server: every way of running the web
    part starts the same one."""
    web, _env = _run_all().parts()["web"]
    line = next(
        line for line in (REPO / path).read_text().splitlines() if "gunicorn gobrave" in line
    )
    expected = ("gobrave.asgi:application", "uvicorn_worker.UvicornWorker")
    assert _server(web) == expected
    assert _server(shlex.split(line.split("gunicorn", 1)[1])) == expected
