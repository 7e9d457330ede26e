#!/usr/bin/env python
"""Run the whole app in one terminal: web, dispatcher, both worker clusters, monitor.

Migrates and collects the static files first, then starts each part as its own process
and keeps them running (a part that dies is restarted after a short pause). Each worker
cluster runs under its own watchdog (``manage.py run_cluster``), which restarts it when
it dies or wedges. Every part dies with this script, however it dies (Linux
``PR_SET_PDEATHSIG``), so a second ``make run`` never finds the first one's processes.
The web part is gunicorn managing uvicorn's ASGI workers (``gobrave.asgi``: a stream holds
no thread; ServeStatic answers the static files), as in production; its control socket is
this checkout's own (``gunicornc -s var/gunicorn.ctl``).
Ctrl-C or SIGTERM stops them all: each process gets SIGTERM on its main pid (the cluster
supervisors and gunicorn stop cleanly that way).

Environment: GOBRAVE_WEB_ADDR (default 127.0.0.1:8000), plus everything in README.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def parts() -> dict[str, tuple[list[str], dict[str, str]]]:
    addr = os.environ.get("GOBRAVE_WEB_ADDR", "127.0.0.1:8000")
    manage = [PY, "manage.py"]
    web = [PY, "-m", "gunicorn", "gobrave.asgi:application", "--bind", addr]
    web += ["--worker-class", "uvicorn_worker.UvicornWorker", "--workers", "2"]
    web += ["--graceful-timeout", "5"]
    # gunicorn's control socket defaults to one per user ($HOME/.gunicorn/gunicorn.ctl),
    # so two installations on one host would share it: each keeps its own in var/.
    web += ["--control-socket", str(ROOT / "var" / "gunicorn.ctl")]
    result = {
        "web": (web, {"GOBRAVE_APP_NAME": "gobrave-web"}),
        "dispatcher": ([*manage, "run_dispatcher"], {"GOBRAVE_APP_NAME": "gobrave-dispatcher"}),
        "create-cluster": ([*manage, "run_cluster", "create"], {}),
        "control-cluster": ([*manage, "run_cluster", "control"], {}),
        "webhooks-cluster": ([*manage, "run_cluster", "webhooks"], {}),
    }
    if (ROOT / "containers" / "management" / "commands" / "run_monitor.py").exists():
        result["monitor"] = ([*manage, "run_monitor"], {"GOBRAVE_APP_NAME": "gobrave-monitor"})
    return result


def die_with_parent() -> None:
    """Runs in each child before exec (this script has no threads): SIGKILL it when this
    script dies. Linux only; elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def main() -> int:
    os.chdir(ROOT)
    subprocess.run([PY, "manage.py", "migrate", "--no-input", "-v0"], check=True)
    # Copies only what changed since the last run into STATIC_ROOT (var/static).
    subprocess.run([PY, "manage.py", "collectstatic", "--no-input", "-v0"], check=True)
    stopping = False

    def stop(*_args):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    running: dict[str, subprocess.Popen] = {}
    specs = parts()

    def launch(name: str) -> None:
        command, extra = specs[name]
        running[name] = subprocess.Popen(
            command, env={**os.environ, **extra}, preexec_fn=die_with_parent
        )
        print(f"[run_all] started {name} (pid {running[name].pid})", flush=True)

    for name in specs:
        launch(name)
    addr = os.environ.get("GOBRAVE_WEB_ADDR", "127.0.0.1:8000")
    print(f"[run_all] gobrave is up: http://{addr}/admin/ and http://{addr}/api/", flush=True)
    while not stopping:
        time.sleep(0.5)
        for name, process in list(running.items()):
            if process.poll() is not None and not stopping:
                print(f"[run_all] {name} exited with {process.returncode}; restarting", flush=True)
                time.sleep(2)
                launch(name)
    for process in running.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for process in running.values():
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
    print("[run_all] stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
