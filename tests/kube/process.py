"""``ClusterProcess``: the emulator and the fake kubelet in a process of their own, driven
over a pipe, for a benchmark that must not share its interpreter (and GIL) with the
cluster it measures: on a cluster the API server and the kubelet are other processes on
other machines. The tests keep ``Emulator`` and ``FakeKubelet`` in-process (``fixtures``).

The child is ``python -m tests.kube.process DIRECTORY``: it starts an ``Emulator`` (its
CA and keys in ``DIRECTORY``) and a ``FakeKubelet``, then answers one JSON line on its
stdout for each JSON line on its stdin (``{"do": "<command>", ...}``; see ``_serve``),
until its stdin ends. What the child logs goes to its stderr, never the pipe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

_ROOT = Path(__file__).resolve().parents[2]  # the repository: ``tests.kube`` is importable
SWITCH_INTERVAL_ENV = "GOBRAVE_KUBE_SWITCH_INTERVAL"  # the child's, from ``switch_interval``


class ClusterError(RuntimeError):
    """The child refused a command or is gone (its message is the child's error)."""


class ClusterProcess:
    """Start with ``start()``, stop with ``stop()``. The emulator's URL, a namespace, a
    kubeconfig, the kubelet's ``finish`` of many Pods at once, and the child's own time."""

    def __init__(self, directory: Path, *, switch_interval: float | None = None) -> None:
        """``switch_interval``: the child's ``sys.setswitchinterval`` (None: Python's 5 ms).
        In one interpreter the thread that writes a burst of Pod statuses holds the GIL
        for up to that long at a time, while the emulator's event loop, woken to send
        the watch events of those writes, waits for it after each socket write (the
        "convoy" of a busy thread and an I/O one): the events then leave the cluster
        long after their writes, a delay of the emulator's own that an API server,
        which streams watch events while it takes writes, does not add."""
        self.directory = directory
        self.switch_interval = switch_interval
        self.url = ""
        self._proc: subprocess.Popen | None = None

    def start(self) -> ClusterProcess:
        env = {**os.environ, "PYTHONPATH": str(_ROOT)}
        if self.switch_interval is not None:
            env[SWITCH_INTERVAL_ENV] = repr(self.switch_interval)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.kube.process", str(self.directory)],
            cwd=_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self._ask("url")
        return self

    def stop(self) -> None:
        """End the child (its stdin closed: it stops the kubelet and the emulator) and
        wait for it."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def _ask(self, command: str, **args: Any) -> Any:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise ClusterError("the cluster process is not running")
        proc.stdin.write(json.dumps({"do": command, **args}) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise ClusterError(f"the cluster process ended (exit {proc.poll()}) on {command!r}")
        answer = json.loads(line)
        if "error" in answer:
            raise ClusterError(answer["error"])
        return answer["ok"]

    # -- commands --------------------------------------------------------------------------

    def create_namespace(self, name: str) -> None:
        self._ask("create_namespace", name=name)

    def write_kubeconfig(self, path: Path, namespace: str) -> str:
        """As ``Emulator.write_kubeconfig``: the child writes it; returns the context."""
        return self._ask("write_kubeconfig", path=str(path), namespace=namespace)

    def finish(self, namespace: str, names: list[str], exit_code: int = 0) -> dict[str, float]:
        """``FakeKubelet.finish`` of each Pod in turn; ``{name: time.time()}`` just before
        each one's status write (one wall clock for both processes on one machine)."""
        return self._ask("finish", namespace=namespace, names=names, exit_code=exit_code)

    def pod_times(self, namespace: str, name: str) -> dict[str, float | None]:
        """When Pod ``name`` was made (``made``: its create stored, before the API's answer
        is written) and when the kubelet began the status write that made it ``Running``
        (``running``), by ``time.time()`` in the cluster process; None for what has not
        happened (the last Pod of that name)."""
        return self._ask("pod_times", namespace=namespace, name=name)

    def switch_interval_in_use(self) -> float:
        """The child's ``sys.getswitchinterval()``."""
        return self._ask("switch_interval")

    def seconds(self) -> dict[str, float]:
        """The child's own time so far: ``busy`` (the emulator's request handlers,
        ``Emulator.busy_seconds``), ``kubelet`` (its steps, ``FakeKubelet.busy_seconds``),
        ``emulator_cpu`` (the emulator thread's CPU time) and ``cpu`` (the whole child's
        CPU time, every thread: TLS, HTTP, handlers, watch streams, the kubelet)."""
        return self._ask("seconds")


# -- the child -------------------------------------------------------------------------------


def _serve(directory: Path, commands: IO[str], answers: IO[str]) -> None:
    from tests.kube.emulator import Emulator
    from tests.kube.kubelet import FakeKubelet

    emulator = Emulator(directory).start()
    clock = _PodClock(emulator.store)
    kubelet = FakeKubelet(emulator.store).start()

    def finish(namespace: str, names: list[str], exit_code: int) -> dict[str, float]:
        written = {}
        for name in names:
            written[name] = time.time()
            kubelet.finish(namespace, name, exit_code)
        return written

    handlers = {
        "url": lambda: emulator.url,
        "create_namespace": emulator.create_namespace,
        "write_kubeconfig": lambda path, namespace: emulator.write_kubeconfig(
            Path(path), namespace
        ),
        "finish": finish,
        "pod_times": lambda namespace, name: clock.times.get((namespace, name), {}),
        "switch_interval": sys.getswitchinterval,
        "seconds": lambda: {
            "busy": emulator.busy_seconds,
            "kubelet": kubelet.busy_seconds,
            "emulator_cpu": emulator.cpu_seconds,
            "cpu": time.process_time(),
        },
    }
    try:
        for line in commands:
            request = json.loads(line)
            try:
                answer = {"ok": handlers[request.pop("do")](**request)}
            except Exception as error:  # the parent raises it as ClusterError
                answer = {"error": f"{type(error).__name__}: {error}"}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
    finally:
        kubelet.stop()
        emulator.stop()


class _PodClock:
    """Times each Pod's create and its first status write into ``Running`` (wall clock),
    wrapping this store's ``create`` and ``update`` (only this child's store). The kubelet
    may step a new Pod to ``Running`` before its create returns to the API's handler (its
    thread is woken by the store): a ``Running`` write from then on is the new Pod's."""

    def __init__(self, store: Any) -> None:
        self.times: dict[tuple[str, str], dict[str, float | None]] = {}
        create, update = store.create, store.update

        def timed_create(resource: str, namespace: str, body: dict, **kwargs: Any) -> Any:
            began = time.time()
            made = create(resource, namespace, body, **kwargs)
            stored = time.time()
            if resource == "pods" and not kwargs.get("dry_run"):
                key = (namespace, made["metadata"]["name"])
                running = (self.times.get(key) or {}).get("running")
                running = running if running is not None and running >= began else None
                at = stored if running is None else min(stored, running)
                self.times[key] = {"made": at, "running": running}
            return made

        def timed_update(resource: str, namespace: str, name: str, change, **kwargs: Any) -> Any:
            began = time.time()
            updated = update(resource, namespace, name, change, **kwargs)
            if resource == "pods" and (updated.get("status") or {}).get("phase") == "Running":
                seen = self.times.setdefault((namespace, name), {"made": None, "running": None})
                if seen["running"] is None:
                    seen["running"] = began
            return updated

        store.create, store.update = timed_create, timed_update


def main() -> None:
    if os.environ.get(SWITCH_INTERVAL_ENV):
        sys.setswitchinterval(float(os.environ[SWITCH_INTERVAL_ENV]))
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # nothing but answers on the pipe: whatever else writes to fd 1 goes to stderr
    sys.stdout = sys.stderr
    _serve(Path(sys.argv[1]), sys.stdin, answers)


if __name__ == "__main__":
    main()
