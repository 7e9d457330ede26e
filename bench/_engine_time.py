"""The engine's part of a create, measured the same way on Docker and on Kubernetes
(``bench/kubernetes.py``, way (d)), and what the bench needs around it: a monitor at rest
between samples, and the machine's engine left as it was found.

- ``AnswerWaits``: the wall-clock intervals one thread spends waiting for the engine's
  answers, from a request sent to its response's headers read
  (``http.client.HTTPConnection.getresponse``: urllib3 calls it for every response, so
  the docker SDK over the unix socket and the kubernetes client over HTTPS alike).
  Building and sending a request and reading and parsing its body stay the caller's.
- ``CallClock``: the wall time that thread spends inside a driver's calls; less its waits
  for answers, the driver's client side.
- ``covered``: how much of a time window a set of intervals covers, each instant once.
- ``MonitorAtRest``: waits, between samples, until the monitor has applied the events of
  the sample just taken (so that its work does not spill into the next one's window).
- ``docker_cleanup``: removes every container the bench's installation label marks on an
  engine, and nothing else.
"""

from __future__ import annotations

import functools
import http.client
import threading
import time

# an event after which the monitor has nothing left to do for a create on either driver
STARTED = "start"


class AnswerWaits:
    """Intervals ``(sent, answered)`` (``time.time()``: the cluster process's clock too)
    that ``thread`` (default: the main thread) spent in ``getresponse``; other threads'
    calls are not timed. Installed once, for the process."""

    def __init__(self, thread: threading.Thread | None = None) -> None:
        self.ident = (thread or threading.main_thread()).ident
        self.intervals: list[tuple[float, float]] = []
        original = http.client.HTTPConnection.getresponse
        waits = self

        @functools.wraps(original)
        def getresponse(conn, *args, **kwargs):
            if threading.get_ident() != waits.ident:
                return original(conn, *args, **kwargs)
            sent = time.time()
            try:
                return original(conn, *args, **kwargs)
            finally:
                waits.intervals.append((sent, time.time()))

        http.client.HTTPConnection.getresponse = getresponse

    def mark(self) -> int:
        return len(self.intervals)

    def since(self, mark: int) -> list[tuple[float, float]]:
        return self.intervals[mark:]


class CallClock:
    """Seconds ``thread`` (default: the main thread) spent inside ``engine``'s calls
    (``CALLS``; a call made inside another is not counted twice). Wraps the engine
    object's own attributes (``engine_for`` returns one object per daemon per process)."""

    CALLS = (
        "create",
        "start",
        "inspect",
        "node_name",
        "image_present",
        "ensure_image",
        "ensure_network",
        "ensure_workspace",
        "stop",
        "remove",
    )

    def __init__(self, engine, thread: threading.Thread | None = None) -> None:
        self.ident = (thread or threading.main_thread()).ident
        self.seconds = 0.0
        self.depth = 0  # the one timed thread's
        for name in self.CALLS:
            method = getattr(engine, name, None)
            if method is not None:
                setattr(engine, name, self._wrap(method))

    def _wrap(self, method):
        @functools.wraps(method)
        def timed(*args, **kwargs):
            if threading.get_ident() != self.ident or self.depth:
                return method(*args, **kwargs)
            self.depth += 1
            began = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - began
                self.depth -= 1

        return timed


def covered(intervals: list[tuple[float, float]], low: float, high: float) -> float:
    """Seconds of ``[low, high]`` that ``intervals`` cover, each instant counted once."""
    clipped = sorted(
        (max(a, low), min(b, high)) for a, b in intervals if min(b, high) > max(a, low)
    )
    total, reached = 0.0, low
    for a, b in clipped:
        if b > reached:
            total += b - max(a, reached)
            reached = b
    return total


class MonitorAtRest:
    """Which instances' ``start`` events the monitor's followers have handed to their
    appliers (``Follower.deliver``, wrapped for the process), and ``wait``: until one
    instance's has come (if asked), every follower's inbox is applied, and no recheck of
    the instance is due."""

    def __init__(self, monitor) -> None:
        from containers.engines.labels import LABEL_INSTANCE
        from containers.execution import monitor as monitor_module

        self.monitor = monitor
        self.started: set[str] = set()
        self.changed = threading.Condition()
        deliver = monitor_module.Follower.deliver
        rest = self

        @functools.wraps(deliver)
        def delivered(follower, event):
            deliver(follower, event)
            if event.action == STARTED:
                with rest.changed:
                    rest.started.add(event.labels.get(LABEL_INSTANCE, ""))
                    rest.changed.notify_all()

        monitor_module.Follower.deliver = delivered

    def wait(self, instance_id: str | None, timeout: float) -> float:
        """Seconds waited; raises ``RuntimeError`` after ``timeout``."""
        began = time.monotonic()
        deadline = began + timeout
        if instance_id is not None:
            with self.changed:
                if not self.changed.wait_for(
                    lambda: instance_id in self.started, deadline - time.monotonic()
                ):
                    raise RuntimeError(f"no start event of {instance_id} after {timeout}s")
        for follower in list(self.monitor.followers.values()):
            inbox = follower.inbox
            with inbox.changed:
                if not inbox.changed.wait_for(
                    lambda inbox=inbox: not inbox.unapplied and inbox.applying == 0,
                    max(0.0, deadline - time.monotonic()),
                ):
                    raise RuntimeError(f"{follower.name}'s events not applied after {timeout}s")
        while instance_id is not None and instance_id in self.monitor._rechecks:
            if time.monotonic() > deadline:
                raise RuntimeError(f"a recheck of {instance_id} still due after {timeout}s")
            time.sleep(0.005)  # polling a dict the monitor's thread owns, with a deadline
        return time.monotonic() - began


def docker_cleanup(base_url: str, installation: str) -> tuple[int, str]:
    """Force-remove every container labelled ``io.gobrave.installation=<installation>``
    on the engine at ``base_url`` (with its anonymous volumes); how many, and what went
    wrong ('' if nothing). Never raises: it runs in the bench's ``finally``."""
    import docker

    from containers.engines.labels import LABEL_INSTALLATION

    removed = 0
    try:
        client = docker.DockerClient(base_url=base_url)
        try:
            ours = client.containers.list(
                all=True, filters={"label": f"{LABEL_INSTALLATION}={installation}"}
            )
            for container in ours:
                if container.labels.get(LABEL_INSTALLATION) != installation:
                    continue  # the filter matches the label exactly; checked again anyway
                try:
                    container.remove(force=True, v=True)
                    removed += 1
                except docker.errors.NotFound:
                    pass
            left = client.containers.list(
                all=True, filters={"label": f"{LABEL_INSTALLATION}={installation}"}
            )
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - said, never raised from a finally
        return removed, f"{exc.__class__.__name__}: {exc}"
    return removed, f"{len(left)} left" if left else ""
