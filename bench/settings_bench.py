"""gobrave's settings plus the bench app (a no-op outbox kind, a polling-only switch).

Used by the benchmarks' processes as ``DJANGO_SETTINGS_MODULE=bench.settings_bench``;
everything else (database, config.yml and its ``GOBRAVE_*`` overrides, django-q2's
clusters) is exactly gobrave's.
"""

from gobrave.settings import *  # noqa: F403
from gobrave.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.apps.BenchConfig"]

GOBRAVE_FAKE_RUNTIME = True  # the benchmarks run on the fake driver, as the tests do
