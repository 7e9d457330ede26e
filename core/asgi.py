"""The ASGI handler gobrave serves: Django's, with the middleware chain run synchronously.

Django's own ``ASGIHandler`` runs each ``MiddlewareMixin`` hook of an async-capable chain
through ``sync_to_async`` (a hand-off to a thread and back per hook: about a dozen per
request with the stack in settings), then the synchronous DRF view through one more.
Here the whole chain, view included, runs in ONE thread per request, exactly as under
WSGI: one hand-off per request. Streams lose nothing: a view returns a
``StreamingHttpResponse`` over an async iterator, the middleware pass it through
untouched, and the handler iterates it on the event loop, holding no thread
(docs/architecture.md, "The web tier").
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class SyncChainASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        # thread_sensitive: the request's thread (ThreadSensitiveContext, one per request),
        # in which Django also closes the response, returning its database connection.
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


def asgi_application():
    """The ASGI application (as ``django.core.asgi.get_asgi_application``)."""
    import django

    django.setup(set_prefix=False)
    return SyncChainASGIHandler()
