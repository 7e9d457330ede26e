"""Autocommit PostgreSQL connections of our own, beside Django's, for LISTEN and the broker.

Django's connection is closed and reopened by ``close_old_connections()`` (which
django-q2 calls around every task and broker call) and may come from a pool; a LISTEN
must outlive all that, so it gets a plain psycopg connection with the same parameters.
"""

from __future__ import annotations

import psycopg
from django.db import connection


def connect(application_name: str) -> psycopg.Connection:
    """A new autocommit connection to Django's default database. The caller closes it."""
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    params["application_name"] = application_name
    return psycopg.connect(autocommit=True, **params)
