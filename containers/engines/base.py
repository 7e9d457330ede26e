"""The engine interface: the one seam between gobrave and a container engine.

Every call to an engine goes through an ``Engine``. Docker is the first
implementation (``docker/``); ``fake.py`` is a file-backed engine that tests
drive across processes; ``kubernetes/`` runs each container as a Pod.

Where drivers really differ, the driver declares it as a capability (an attribute every
driver sets, read above the seam), never as a test of its name: ``stop_removes`` (a
stop deletes the engine's object: a stopped Kubernetes instance has no Pod, which is
normal, not "missing"), ``honours_node_constraints`` (constraints prefixed ``node.``
become the engine's node selection), ``start_runs`` (a ``start`` returns once the
container runs or has run: not so on Kubernetes, where a Pod runs later).

Errors: ``EngineError`` is retriable (the relay backs off and tries again),
``PermanentEngineError`` is not (the request goes dead and the instance fails). Either
message is what a person reads on the instance ("retrying (attempt 2 of 8): <message>, ..."
or "create failed: <message>"): what was tried, then the engine's own words.
Every method is idempotent where the docstring says so: the relay delivers at
least once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Protocol


class EngineError(Exception):
    """A retriable engine error (daemon unreachable, timeout, conflict in flight)."""

    retry_after: float | None = None


class PermanentEngineError(EngineError):
    """An error that retrying cannot fix (image missing under pull policy never, bad spec)."""


class EngineFullError(EngineError):
    """The engine refuses for lack of room of its own (a Kubernetes namespace's
    ``ResourceQuota``): the request waits and is tried again, with no attempt counted and
    the reason shown on the instance (the handlers turn it into the relay's ``Defer``)."""


class StaleTaskError(EngineError):
    """The engine holds a task for a container it does not run, so it can never start
    that container again: a daemon restarted while a start of it was in flight.

    Retrying the same container fails the same way, through further daemon restarts;
    a new container in its place starts. Retriable as raised (a caller that cannot
    replace the container lets the relay back off like any engine error).
    """


@dataclass(frozen=True)
class Mount:
    """One mount: a host path (``bind``) or a named volume (``volume``).

    ``workspace`` marks the owner's workspace (provisioned by gobrave before the create;
    a volume is mounted without Docker's copy-up, so the ownership set stays).
    """

    source: str
    target: str
    read_only: bool = False
    type: str = "bind"  # bind | volume
    workspace: bool = False


@dataclass(frozen=True)
class Workspace:
    """An owner's workspace on one engine: a named volume or a host directory, owned by
    ``uid:gid`` with mode 2770 (setgid: files made in it keep the owner's group)."""

    kind: str  # volume | directory
    source: str  # the volume name, or the host directory
    uid: int
    gid: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerSpec:
    """Everything the engine needs to create one container, resolved at request time."""

    name: str
    image: str
    labels: dict[str, str]
    command: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    cpu: float | None = None  # cores, e.g. 0.5
    memory: int | None = None  # bytes
    pull_policy: str = "if_not_present"  # never | if_not_present | always
    user: str | None = None  # "uid:gid"; None: the image's user
    group_add: list[str] = field(default_factory=list)
    # Hardening (containers.spec.hardening): every capability is dropped, then cap_add given.
    cap_add: list[str] = field(default_factory=list)
    no_new_privileges: bool = True
    pids_limit: int | None = None
    read_only_rootfs: bool = False
    tmpfs_size: int | None = None  # bytes of the /tmp tmpfs when the root is read-only
    network: str | None = None  # bridge | none | a network name; None: the engine's default
    oci_runtime: str | None = None  # e.g. runsc; None: the engine's default
    # Keys of ``env`` whose values are secret (the template's ``secret_env``): a driver that
    # can keep them apart does (Kubernetes: a Secret per instance, ``secretKeyRef``).
    secret_env: list[str] = field(default_factory=list)
    # Constraints prefixed ``node.`` without the prefix (``disktype: ssd``): the engine's
    # node selection, on drivers that ``honours_node_constraints``.
    node_selector: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerState:
    """What the engine says about one container right now."""

    runtime_id: str
    name: str
    # Docker's words: created | running | paused | restarting | removing | exited | dead;
    # also rejected (the engine will never run it: ``error`` says why) and unknown (no
    # word from its node: nothing new).
    status: str
    labels: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""
    node_name: str = ""
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    # The engine accepted it and waits for room of its own (a Pod waiting for a node);
    # ``error`` says why ("waiting for a node: ...").
    waiting: bool = False


@dataclass(frozen=True)
class ContainerStats:
    """What the engine measured of one running container, from one cheap look.

    The CPU is given one of two ways, as the engine counts it: ``cpu_total_ns``, the CPU
    time the container used since it started (Docker's cgroup counter: the rate is the
    difference between two looks over the wall time between them, ``read_at``), or
    ``cpu_cores``, a rate the engine averaged itself (the Kubernetes metrics API: cores
    over its last window). ``read_at`` is epoch seconds on the caller's clock.

    ``is_rate`` says which: a rate speaks only for the engine's recent window, so the
    idle rule counts a container idle from the first of an unbroken series of quiet
    looks (``containers.execution.policies``); a counter's difference covers the whole
    time between two looks.
    """

    read_at: float
    cpu_total_ns: int | None = None
    cpu_cores: float | None = None
    memory_bytes: int | None = None

    @property
    def is_rate(self) -> bool:
        """The CPU figure is the engine's own rate over its recent window (not a counter)."""
        return self.cpu_cores is not None

    def cores_since(self, previous: ContainerStats | None) -> float | None:
        """Cores used: the engine's own rate, or the counter's difference since
        ``previous`` over the wall time between the looks. None when it cannot be told
        yet (a counter's first look, or a counter that went back: a restart)."""
        if self.cpu_cores is not None:
            return self.cpu_cores
        if previous is None or previous.cpu_total_ns is None or self.cpu_total_ns is None:
            return None
        elapsed = self.read_at - previous.read_at
        used = self.cpu_total_ns - previous.cpu_total_ns
        if elapsed <= 0 or used < 0:
            return None
        return used / 1e9 / elapsed


@dataclass(frozen=True)
class EngineEvent:
    """One lifecycle event of one of our containers, as the engine reported it.

    ``action`` is one of: ``start``, ``die``, ``oom``, ``pause``, ``unpause``,
    ``destroy``, ``stop``, ``kill``, ``create``, ``wait`` (the engine waits for room of
    its own: ``ContainerState.waiting``), ``place`` (it found room for a container that
    waited, which does not run yet: a Pod scheduled). ``time_nano`` is when it happened (the
    engine's clock, or when the driver saw it). ``cursor`` is the monitor's resume point,
    opaque to everything but the driver that made it (Docker: ``time_nano`` as a string;
    Kubernetes: a ``resourceVersion``); empty means ``str(time_nano)``. ``state``: the
    container's state as of this event, where the engine's event carries it (a
    Kubernetes watch event carries the whole Pod); None: the monitor asks the engine
    (``inspect``). Never set for a ``destroy``.
    """

    action: str
    runtime_id: str
    name: str
    labels: dict[str, str]
    time_nano: int
    exit_code: int | None = None
    cursor: str = ""
    state: ContainerState | None = None

    def __post_init__(self) -> None:
        if not self.cursor:
            object.__setattr__(self, "cursor", str(self.time_nano))


class Engine(Protocol):
    """What gobrave asks of an engine. One instance per process; never shared across fork.

    Declared capabilities (class attributes, read above the seam):

    - ``stop_removes``: a stop deletes the engine's object (a Kubernetes Pod). A stopped
      instance with no object is then normal, not "missing"; ``start`` makes the object
      again from the stored spec.
    - ``honours_node_constraints``: constraints prefixed ``node.`` become the engine's own
      node selection (a ``nodeSelector``); placement skips engines that cannot honour them.
    - ``reports_cpu``: ``stats`` measures a container's CPU; a template's ``idle_timeout``
      is refused where the engine cannot (``containers.spec.policies``).
    - ``cpu_discovered``: whether an engine of this driver gives CPU figures is its own
      (a Kubernetes cluster serves the metrics API or not): ``stats_served`` asks it when
      its runtime is checked or saved, and the answer is stored on the row
      (``Runtime.serves_stats``), which the validation reads. False: every engine of the
      driver does (``reports_cpu``).
    - ``start_runs``: ``start`` returns once the container runs (or ran and ended), so
      the worker's inspect after it sees at least what the engine's ``start`` event
      says. False on Kubernetes: the Pod is made, and runs when the kubelet starts it.
    """

    stop_removes: bool
    honours_node_constraints: bool
    reports_cpu: bool
    cpu_discovered: bool
    start_runs: bool

    def ping(self) -> bool:
        """True when the engine answers."""

    def check(self, *, timeout: float | None = None) -> None:
        """Ask the engine now; raise ``EngineError`` saying, in an operator's words, why it
        does not answer (the health reason pages show). ``timeout``: seconds the answer
        may take (None: the driver's own call timeout); a slower answer is no answer, and
        the call returns in about that time (a heartbeat's thread is not held longer)."""

    def node_name(self) -> str:
        """The engine host's name (for backfilling ``runtime_node_name``)."""

    def image_present(self, image: str) -> bool | None:
        """True when the image is in the engine's local store; None when the engine cannot
        tell (a cluster: whichever node runs the Pod pulls it, per ``imagePullPolicy``)."""

    def ensure_image(self, image: str, pull_policy: str) -> None:
        """Make the image available per policy; missing under ``never`` is permanent."""

    def ensure_workspace(self, workspace: Workspace, *, image: str) -> None:
        """Make sure ``workspace`` exists and is owned ``uid:gid``, mode 2770.

        Idempotent; never deletes or empties anything. ``image`` (already present) lends
        a throw-away container the engine needs to set the ownership; it runs nothing.
        """

    def ensure_network(self, name: str, *, labels: dict[str, str]) -> None:
        """Make sure the bridge network ``name`` exists (idempotent)."""

    def create(self, spec: ContainerSpec) -> str:
        """Create the container named ``spec.name`` and return its engine-side id.

        Idempotent: if a container with that name and our instance label exists,
        it is adopted and its id returned; a name held by a foreign container is a
        permanent error.
        """

    def start(self, ref: str, spec: ContainerSpec | None = None) -> ContainerState | None:
        """Start (or unpause) the container. Idempotent on a running container.

        ``spec`` is the instance's stored spec (the one its create used): a driver whose
        stop removes its object (``stop_removes``) makes the object again from it; the
        others ignore it. ``StaleTaskError`` when the engine can no longer start this
        container.

        Returns the container's state as the engine's answer to the start gave it (what
        ``inspect`` would have said then: Kubernetes answers a Pod's create with the
        Pod), or None when that answer says nothing of it (Docker's start answers 204):
        the caller then inspects.
        """

    def stop(self, ref: str, timeout: int) -> None:
        """Stop, killing after ``timeout`` seconds. Idempotent; a missing container is fine."""

    def remove(self, ref: str) -> None:
        """Force-remove the container. Idempotent; a missing container is fine."""

    def remove_volume(self, name: str) -> None:
        """Remove the named volume. Idempotent; a missing volume is fine."""

    def volume_sizes(self, names: list[str]) -> dict[str, int]:
        """Bytes each of the named volumes holds, for those the engine says (a volume it
        cannot measure, or does not have, is left out). May be slow (Docker measures
        every volume at once): callers bound it (``calls.bounded_call``)."""

    def inspect(self, ref: str) -> ContainerState | None:
        """The container's state, or None when it does not exist."""

    def stats(self, ref: str) -> ContainerStats | None:
        """One cheap look at the running container's CPU (and memory): one engine call,
        never a stream, never a wait for a second sample (the caller keeps the previous
        look and takes the difference). None when the container does not exist, is not
        running, or the engine has no figure for it yet (a metrics API that has not
        scraped it). ``EngineError`` when the engine does not answer."""

    def stats_served(self, *, timeout: float | None = None) -> bool:
        """Whether this engine gives CPU figures at all (``stats`` can ever answer), asked
        now, within ``timeout`` seconds if given: Docker always; a Kubernetes cluster when
        it serves ``metrics.k8s.io/v1beta1`` (API discovery, one GET). ``EngineError``
        when the engine does not answer (or cannot say: the answer is then unknown)."""

    def logs(self, ref: str, tail: int = 100) -> Iterator[bytes]:
        """The last ``tail`` lines of output (stdout and stderr), as the engine sends them:
        chunks of bounded size, none when the container is missing.

        Opens at once (an engine that does not answer raises here); the caller reads only
        as much as it wants and then closes the iterator, which closes the engine stream
        (``calls.container_logs`` caps an answer's bytes this way). Reading is bounded in
        time by the driver.
        """

    async def follow_logs(self, ref: str, *, tail: int, until: float) -> AsyncIterator[bytes]:
        """The last ``tail`` lines, then new output as it comes: a coroutine that opens the
        stream and returns an async iterator of raw chunks (stdout and stderr, demultiplexed;
        a chunk may end inside a line or a character).

        1. Opening is bounded in time by the driver: an engine that does not answer raises
           ``EngineError`` here, before anything is read; a missing container gives an
           empty iterator.
        2. The iterator ends when the container stops, the stream drops, or the wall clock
           passes ``until`` (epoch seconds), whichever comes first, also on a container
           that prints nothing.
        3. ``await it.aclose()``, and the cancellation of the task iterating it, close the
           engine connection at once; none is kept in a pool once the follow ends.
        4. A slow reader holds the engine back (a bounded buffer), never more in memory.

        Runs on an event loop and touches no database. Drivers that cannot read their
        transport asynchronously run their blocking stream through
        ``containers.engines.follows.follow_in_thread`` (a thread per follower).
        """

    def list_ours(
        self, installation: str, labels: dict[str, str] | None = None
    ) -> list[ContainerState]:
        """Every container (any state) that carries our installation label (and every
        one of ``labels``, filtered by the engine): its id, name, status and labels, as
        the engine lists them (no exit code, node or times: ``inspect`` has those)."""

    def event_cursor_now(self) -> str:
        """A cursor at this moment: ``events`` from it gives what happens after this call
        (the monitor's first session starts here; its reconcile covers the past)."""

    def events(self, installation: str, since: str | None = None) -> Iterator[EngineEvent]:
        """Follow lifecycle events of our containers, from the cursor ``since`` (an
        ``EngineEvent.cursor`` or ``event_cursor_now()``, opaque to the caller).

        Never an event from before ``since``; events *at* it may come again (Docker's
        ``since`` is inclusive and whole-second): the caller drops those it applied, by
        cursor and ``(runtime_id, action)``. Without ``since``, only new events. The
        iterator ends when the stream drops; the caller reconnects. Blocking, unlike
        ``follow_logs``: its one reader is the monitor, a sync process with one thread per
        engine, so an async stream would buy nothing there.
        """
