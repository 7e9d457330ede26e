"""What every process gobrave forks inherits, and what it must not.

django-q2 forks its workers (main → sentinel → pusher, workers, monitor). After a fork:

1. The child forgets every inherited database connection and pool, and keeps a
   reference to them so that garbage collection never closes the parent's sockets from
   the child (a shared socket, or Django's psycopg pool whose threads do not survive a
   fork, would corrupt the parent's session).
2. On Linux the child asks to be killed when its parent dies
   (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), and exits at once if the parent is already
   gone. A ``qcluster`` main killed by SIGKILL so takes its sentinel with it, and the
   sentinel its workers, monitor and pusher: no orphan keeps taking tasks beside the
   cluster started in its place. (The signal follows the thread that forked; django-q2
   forks from each process's main thread.)
3. A process started by a launcher that asks for it (``GOBRAVE_DIE_WITH_PARENT=<pid>``
   in its environment: ``run_cluster`` for its ``qcluster``) does the same at start, so
   a supervisor killed outright leaves no cluster behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import time

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1

_inherited: list[object] = []
_installed = False
_forking_pid = 0


def _forget_in_child() -> None:
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if conn.connection is not None:
            _inherited.append(conn.connection)
            conn.connection = None
    for conn in connections.all(initialized_only=True):
        pools = getattr(type(conn), "_connection_pools", None)
        if pools:
            _inherited.append(dict(pools))
            pools.clear()


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux; else nothing)."""
    if _LIBC is None:
        return
    if _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %s", ctypes.get_errno())
        return
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os._exit(1)


def _remember_parent() -> None:
    global _forking_pid
    _forking_pid = os.getpid()


def _in_child() -> None:
    _forget_in_child()
    die_with_parent(_forking_pid)


def _die_with_launcher() -> None:
    """Honour ``GOBRAVE_DIE_WITH_PARENT`` once, in the process its launcher started.

    The variable is removed so that nothing this process starts inherits it; a process
    whose parent is not the launcher named (a grandchild that imported Django after a
    fork) ignores it, and one whose launcher is already gone exits.
    """
    launcher = os.environ.pop("GOBRAVE_DIE_WITH_PARENT", "")
    if not launcher.isdigit():
        return
    if os.getppid() == int(launcher):
        die_with_parent(int(launcher))
    elif os.getppid() == 1:
        os._exit(1)


def install() -> None:
    global _installed
    if not _installed:
        os.register_at_fork(before=_remember_parent, after_in_child=_in_child)
        _die_with_launcher()
        _installed = True


def health_checks_off() -> None:
    """In a django-q2 worker or pusher process: no connection health check per task.

    django-q2 closes the connection before every task (and the broker before every
    read); with ``CONN_HEALTH_CHECKS`` every reopening is checked with a statement of its
    own, half the commits of a relayed row. Unchecked, a connection that died (a
    PostgreSQL restart) fails the first statement instead: ``relay.execute()`` then
    retries ``begin()`` once on a fresh connection, the broker reconnects on its next
    read, and Django closes the broken connection before the next task.
    """
    from django.db import connections

    for conn in connections.all():
        conn.settings_dict["CONN_HEALTH_CHECKS"] = False
        conn.health_check_enabled = False


# How often a django-q2 worker gives its connection back between tasks (see below).
CONNECTION_CHECK_EVERY = 1.0


def connection_checks_throttled() -> None:
    """In a django-q2 worker: the connection is given back (to the pool, or closed when
    unusable or old) at most every ``CONNECTION_CHECK_EVERY``, not before every task.

    django-q2 calls ``close_old_connections`` before each task; with a pool that returns
    the connection and takes it back again for the task's first statement, a cost on
    every row's way to its handler. A connection that died meanwhile fails that first
    statement instead, which ``relay.begin_delivered`` retries once on a fresh one.
    """
    from django_q import worker

    original = worker.close_old_django_connections
    if getattr(original, "throttled", False):
        return
    next_check = 0.0

    def throttled() -> None:
        nonlocal next_check
        now = time.monotonic()
        if now >= next_check:
            next_check = now + CONNECTION_CHECK_EVERY
            original()

    throttled.throttled = True
    worker.close_old_django_connections = throttled
