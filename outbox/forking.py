"""Keep database connections and pools from crossing ``fork()``.

django-q2 forks its workers. A child that inherited the parent's open connection (or
Django's psycopg pool, whose threads do not survive a fork) would share a socket with
its parent. After a fork the child forgets every inherited connection and pool, and
keeps a reference to them so that garbage collection never closes the parent's
sockets from the child.
"""

from __future__ import annotations

import os

_inherited: list[object] = []
_installed = False


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


def install() -> None:
    global _installed
    if not _installed:
        os.register_at_fork(after_in_child=_forget_in_child)
        _installed = True
