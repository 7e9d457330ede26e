"""Streams as HTTP responses: plain text (a followed output) and server-sent events.

``open_stream`` is what a view calls, in its request thread: it takes the viewer's
place (``stream_open``: a 429 when over a limit) and returns the response whose body
runs ``streams.guard.guarded`` on the event loop. The request's database connection is
given back when its thread's part ends, before the body starts (``core.asgi``): the
stream holds none while it waits.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from django.http import StreamingHttpResponse

from core.asgi import SERVER_SEND, connection_dropper
from streams.guard import KEEPALIVE, Ended, StreamBody, db_call, guarded
from streams.services import (
    AccessRule,
    stream_close,
    stream_config,
    stream_keep,
    stream_open,
    stream_stall_seconds,
)
from streams.viewers import Viewer, viewer_of

SSE_KEEPALIVE_SECONDS = 15.0

# Turns each item of a source into the bytes sent (None: nothing), and says an end.
Encoder = Callable[[Any], bytes | None]


def sse_event(event: str, data: Any) -> bytes:
    """One server-sent event; ``data`` as JSON on one line (text keeps its newlines)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def text_encoder(item: Any) -> bytes | None:
    if isinstance(item, Ended):
        return f"\n[gobrave: stream ended: {item.reason}]\n".encode() if item.reason else None
    if item is KEEPALIVE:
        return None
    return item if isinstance(item, bytes) else str(item).encode()


def sse_encoder(item: Any) -> bytes | None:
    """Items are ``(event, data)`` pairs; an end is the ``end`` event (the page closes
    its EventSource on it, instead of reconnecting)."""
    if isinstance(item, Ended):
        return sse_event("end", {"reason": item.reason})
    if item is KEEPALIVE:
        return b": keep-alive\n\n"
    event, data = item
    return sse_event(event, data)


def open_stream(
    request,
    source: Callable[[], AsyncIterator[Any]],
    *,
    allowed: AccessRule,
    sse: bool,
    seconds: float | None = None,
) -> StreamingHttpResponse:
    """A streaming response of ``source()`` (made on the event loop, when the body starts)
    for the authenticated user of ``request``, checked by ``allowed`` while it is open.

    Raises ``StreamLimitReached`` before anything is sent. ``seconds`` shortens the
    stream's time limit (``streams.max_seconds``).
    """
    viewer = viewer_of(request)
    lease_id = stream_open(viewer=viewer)
    config = stream_config()
    asked = seconds is not None and seconds <= config["max_seconds"]
    total = seconds if asked else config["max_seconds"]
    body = _body(
        source,
        viewer=viewer,
        lease_id=lease_id,
        allowed=allowed,
        encode=sse_encoder if sse else text_encoder,
        total=total,
        total_said=not asked,
        keepalive=SSE_KEEPALIVE_SECONDS if sse else None,
    )
    content_type = "text/event-stream" if sse else "text/plain; charset=utf-8"
    # The connection is dropped when the client takes nothing for stall_seconds (core.asgi).
    drop = connection_dropper(getattr(request, "scope", {}).get(SERVER_SEND))
    chunks = StreamBody(body, stall=stream_stall_seconds(), drop=drop)
    response = StreamingHttpResponse(chunks, content_type=content_type)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not buffer it
    return response


async def _body(
    source: Callable[[], AsyncIterator[Any]],
    *,
    viewer: Viewer,
    lease_id: int,
    allowed: AccessRule,
    encode: Encoder,
    total: float,
    total_said: bool,
    keepalive: float | None,
) -> AsyncIterator[bytes]:
    config = stream_config()

    async def check() -> str | None:
        return await db_call(stream_keep, lease_id=lease_id, viewer=viewer, allowed=allowed)

    async def finish() -> None:
        await db_call(stream_close, lease_id=lease_id)

    items = guarded(
        source(),
        idle=config["idle_seconds"],
        total=total,
        every=config["lease_seconds"] / 3,
        check=check,
        finish=finish,
        keepalive=keepalive,
        total_said=total_said,
    )
    try:
        async for item in items:
            data = encode(item)
            if data:
                yield data
    finally:
        await items.aclose()
