"""The ASGI handler gobrave serves: Django's, with each request's synchronous part run in
one thread of a bounded pool, given back when the response is ready.

1. Django's own ``ASGIHandler`` runs each ``MiddlewareMixin`` hook of an async-capable
   chain through ``sync_to_async`` (a hand-off to a thread and back per hook: about a
   dozen per request with the stack in settings), then the synchronous DRF view through
   one more. Here the whole chain, view included, runs in ONE thread, as under WSGI.
2. Django makes a thread per request (its ``ThreadSensitiveContext``) and keeps it until
   the response has been sent, so a stream would hold an idle thread (its stack, a few
   hundred KiB) for its whole life. Here the synchronous part runs on a bounded pool of
   ``GOBRAVE_WEB_THREADS`` threads (8 by default), reused as a threaded WSGI server
   reuses its threads: the request gives its database connections back (to the pool)
   at its end, in its thread, as Django's ``request_finished`` would under WSGI, and a
   ``StreamingHttpResponse`` over an async iterator is then sent from the event loop
   alone (docs/architecture.md, "The web tier"). More requests at once than threads
   wait for one, as under WSGI.

3. A stream may have to drop its client's connection (one that takes nothing:
   ``streams.guard.StreamBody``): the scope carries the server's ``send`` under
   ``SERVER_SEND``, and ``connection_dropper`` finds the connection behind it, for a
   stream only.

4. The collector is tuned for a process holding many open streams (``asgi_application``).

What Django does around the response (``request_started``, ``response.close()`` and
``request_finished``) runs in asgiref's one thread for code outside a request's context;
none of it holds a connection.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.db import close_old_connections

GC_THRESHOLDS = (50_000, 20, 100)

# The scope's key for the server's ``send`` (``connection_dropper`` reads it).
SERVER_SEND = "gobrave.server_send"


def connection_dropper(send) -> Callable[[], None] | None:
    """How to reset the connection ``send`` writes to, or None under a server that does
    not show it: uvicorn's ``send`` is a method of the request's cycle, which holds the
    connection's transport.

    The reset (``SO_LINGER`` 0, then ``abort``) frees at once what the kernel buffered
    for the client, which a close would keep, sending it for minutes to a client that
    takes nothing; uvicorn sees it as a disconnect, and so does Django's handler.
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if not callable(getattr(transport, "abort", None)):
        return None

    def drop() -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    return drop


class SyncChainASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def __call__(self, scope, receive, send):
        # As Django's, without a ThreadSensitiveContext around the whole exchange: the
        # request's thread lives in get_response_async only.
        if scope["type"] != "http":
            raise ValueError(f"gobrave serves HTTP only, not {scope['type']}")
        scope[SERVER_SEND] = send
        await self.handle(scope, receive, send)

    def __init__(self) -> None:
        super().__init__()
        threads = int(os.environ.get("GOBRAVE_WEB_THREADS", "8"))
        self.threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="request")

    async def get_response_async(self, request):
        respond = sync_to_async(self._respond, thread_sensitive=False, executor=self.threads)
        return await respond(request)

    def _respond(self, request):
        try:
            return self.get_response(request)
        finally:
            # What Django does at a request's end, here in the request's own thread: a
            # connection goes back to the pool (CONN_MAX_AGE 0 with the pool), or stays
            # with this reused thread until its CONN_MAX_AGE (no pool).
            close_old_connections()


def asgi_application():
    """The ASGI application (as ``django.core.asgi.get_asgi_application``)."""
    import django

    django.setup(set_prefix=False)
    # Open streams are many long-lived objects (connections, generators, frames); with
    # Python's default thresholds the collector walked them again and again while
    # ordinary requests allocated, and GET /api/containers/ took twice as long with 200
    # quiet followers open (bench/streams.py). What was loaded at start is frozen out of
    # every collection, and young collections run every 50,000 allocations, not 700.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return SyncChainASGIHandler()
