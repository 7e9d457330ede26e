"""gobrave's settings for the test suite (pytest's ``DJANGO_SETTINGS_MODULE``).

Exactly gobrave's settings, plus the ``fake`` runtime driver, which only tests (and the
benchmarks) may choose, and no per-owner quotas: most tests make many instances for one
owner (the concurrency tests' 50 admitted of 200 among them), so a quota applies only where
a test sets one (``gobrave_config``, or ``GOBRAVE_CONTAINER_MAX_*_PER_OWNER`` for the
processes it starts). The processes the tests start inherit this module.
"""

import os

from gobrave.settings import *  # noqa: F403
from gobrave.settings import GOBRAVE

GOBRAVE_FAKE_RUNTIME = True

for _key in ("max_pending_per_owner", "max_instances_per_owner"):
    if f"GOBRAVE_CONTAINER_{_key.upper()}" not in os.environ:
        GOBRAVE["container"][_key] = None
