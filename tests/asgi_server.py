"""The ``live_server`` of the tests: uvicorn serving ``gobrave.asgi`` (the application
production serves) in a thread of the test process, in place of pytest-django's threaded
WSGI server. Same interface as pytest-django's ``LiveServer`` (``url``, ``stop``, and the
settings its autouse helper enables per test).

In-process, so it shares the test database (tests that use it are transactional, as with
pytest-django's). Static files come from the finders (Django's ``ASGIStaticFilesHandler``),
as pytest-django's server serves them, since the tests run no ``collectstatic``.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import uvicorn
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.test.utils import modify_settings

BACKLOG = 2048  # as gunicorn's and uvicorn's own default: 200 clients at once are queued


class AsgiLiveServer:
    def __init__(self, host: str = "127.0.0.1") -> None:
        from gobrave.asgi import django_application

        self.host = host
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, 0))
        self._socket.listen(BACKLOG)
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            ASGIStaticFilesHandler(django_application),
            lifespan="off",
            log_level="warning",
            backlog=BACKLOG,
        )
        self._server = uvicorn.Server(config)
        self._live_server_modified_settings = modify_settings(ALLOWED_HOSTS={"append": host})
        self._thread = threading.Thread(target=self._serve, name="asgi-live-server", daemon=True)
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the ASGI live server did not start")
            self._thread.join(0.01)

    def _serve(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __str__(self) -> str:
        return self.url

    def __add__(self, other: str) -> str:
        return f"{self}{other}"
