"""WSGI entry point, for a WSGI server where streams need not scale (a follower holds a
thread there); production serves ``gobrave.asgi``. Static files as in ``gobrave.asgi``."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application
from servestatic import ServeStatic

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gobrave.settings")
application = ServeStatic(
    get_wsgi_application(), root=settings.STATIC_ROOT, prefix=settings.STATIC_URL
)

# Request counters (create_accepted...) are written once a second per web process, not in
# a transaction of their own before every answer (core.counters). A server that forks
# after loading this (gunicorn --preload) writes them at once in its workers instead.
from core.counters import counters_buffer_start  # noqa: E402

counters_buffer_start()
