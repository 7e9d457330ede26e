"""gobrave's settings for the test suite (pytest's ``DJANGO_SETTINGS_MODULE``).

Exactly gobrave's settings, plus the ``fake`` runtime driver, which only tests (and the
benchmarks) may choose. The processes the tests start inherit this module.
"""

from gobrave.settings import *  # noqa: F403

GOBRAVE_FAKE_RUNTIME = True
