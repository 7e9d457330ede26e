"""WSGI entry point."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gobrave.settings")
application = get_wsgi_application()

# Request counters (create_accepted...) are written once a second per web process, not in
# a transaction of their own before every answer (core.counters). A server that forks
# after loading this (gunicorn --preload) writes them at once in its workers instead.
from core.counters import counters_buffer_start  # noqa: E402

counters_buffer_start()
