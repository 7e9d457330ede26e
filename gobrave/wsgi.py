"""WSGI entry point, for tools that want one (``manage.py runserver``). Production serves
``gobrave.asgi``: under WSGI a stream (a follow, a live page) is buffered whole by Django
and answers only when it ends. Static files as in ``gobrave.asgi``."""

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
