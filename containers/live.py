"""What the streams of an instance carry: its output, followed, and its state, watched.

The web tier's streaming mechanism is the ``streams`` app (leases, limits, the checks
while open, text and server-sent events); this module gives it the containers' parts:

- ``output_follow_open``: opens the engine's follow of an instance's output (in the
  request thread, so an engine that does not answer is a 503 before anything is sent);
- ``output_text``: that output as the viewer may see it (decoded, secrets scrubbed);
- ``INSTANCE_STATE``: one query per web process per second for the state of every
  instance watched there (``streams.hub``);
- ``watch_rule``: whether a user may go on watching an instance (asked at every check).
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import async_to_sync

from containers import selectors, states
from containers.engines import calls
from containers.models import ContainerInstance
from containers.spec import redaction
from streams.hub import Topic


def output_follow_open(
    *, instance: ContainerInstance, tail: int, seconds: float
) -> AsyncIterator[Any]:
    """Open the engine's follow of ``instance``'s output, from its last ``tail`` lines,
    for at most ``seconds`` and 1 MiB (``calls.container_logs_follow``).

    Called in a request thread under the ASGI server: the stream is opened on the
    server's event loop, which then reads it. Raises the engine's errors (as
    ``calls.container_logs_follow``); the stream ends by itself when the container stops.
    """
    instance.runtime  # noqa: B018 - loaded here: the stream reads no database
    return async_to_sync(calls.container_logs_follow)(instance=instance, tail=tail, seconds=seconds)


async def output_text(
    stream: AsyncIterator[Any], *, sees_secrets: bool, spec: dict
) -> AsyncIterator[str]:
    """``stream``'s chunks as text (UTF-8, a character cut between chunks kept whole),
    scrubbed of the instance's secret values unless the viewer ``sees_secrets``
    (``redaction.sees_secrets``, asked in the request's thread: a permission check may
    read the database, which the event loop must not). Closing this closes ``stream``."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    values = redaction.secret_values(spec)
    scrubber = None if sees_secrets or not values else redaction.LogScrubber(values)
    try:
        async for chunk in stream:
            text = decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
            if scrubber is not None:
                text = scrubber.feed(text)
            if text:
                yield text
        rest = decoder.decode(b"", final=True)
        if scrubber is not None:
            rest = scrubber.feed(rest) + scrubber.flush()
        if rest:
            yield rest
    finally:
        await stream.aclose()


def watch_rule(instance_id):
    """The access rule of a stream of one instance: the user still sees it (the API's
    rule, ``selectors.instance_list``) and it is not being deleted."""

    def allowed(user) -> str | None:
        status = (
            selectors.instance_list(user=user)
            .filter(id=instance_id)
            .values_list("status", flat=True)
            .first()
        )
        if status is None:
            return "the instance is gone, or you may no longer see it"
        if status in states.BEING_DELETED:
            return "the instance is being deleted"
        return None

    return allowed


# How much longer than its stream's own limit an engine follow may last: the stream's
# guard ends first and says why.
FOLLOW_MARGIN_SECONDS = 60

STATE_FIELDS = ("status", "status_reason", "status_changed_at", "exit_code", "container_id")


def _instance_states(keys: list) -> dict:
    rows = ContainerInstance.objects.filter(id__in=keys).values_list("id", *STATE_FIELDS)
    return {row[0]: row[1:] for row in rows}


INSTANCE_STATE = Topic("instance-state", read=_instance_states, every=1.0)
