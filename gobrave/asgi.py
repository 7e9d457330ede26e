"""ASGI entry point: the web app as production serves it (gunicorn with uvicorn workers).

Streams (log follow, live pages) are async responses, so a follower holds no worker thread
(docs/architecture.md, "The web tier"); the DRF views stay synchronous and run, with the
middleware, in one thread per request (``core.asgi``).
Static files from ``STATIC_ROOT`` (``collectstatic``) are answered here by ServeStatic,
before Django.
"""

import os

from django.conf import settings
from servestatic import ServeStaticASGI

from core.asgi import asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gobrave.settings")
django_application = asgi_application()
application = ServeStaticASGI(
    django_application, root=settings.STATIC_ROOT, prefix=settings.STATIC_URL
)

# Request counters (create_accepted...) are written once a second per web process, not in
# a transaction of their own before every answer (core.counters).
from core.counters import counters_buffer_start  # noqa: E402

counters_buffer_start()
