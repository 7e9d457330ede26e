"""gobrave's settings plus the bench app (a no-op outbox kind, a polling-only switch).

Used by the benchmarks' processes as ``DJANGO_SETTINGS_MODULE=bench.settings_bench``;
``BENCH_STOCK_ORM=1`` swaps gobrave's broker for django-q2's stock ORM broker (the relay
X
clusters) is exactly gobrave's.
"""

import os

from gobrave.settings import *  # noqa: F403
from gobrave.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.apps.BenchConfig"]

GOBRAVE_FAKE_RUNTIME = True  # the benchmarks run on the fake driver, as the tests do

if os.environ.get("BENCH_STOCK_ORM") == "1":
    # The relay benchmark's baseline: django-q2's own ORM broker (it polls every
    # queue.poll), in place of gobrave's broker that the shipped config uses on PostgreSQL.
    for _cluster in (Q_CLUSTER, *Q_CLUSTER["ALT_CLUSTERS"].values()):  # noqa: F405
        _cluster.pop("broker_class", None)
