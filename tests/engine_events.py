"""The engine's ``create`` events during a block, read as they come.

A later read of the engine's events from a ``since`` gets only what the engine still
holds (Docker keeps its last 256 events), which the other tests on the shared engine
can overrun; a stream opened before the block sees them all.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator

from tests.containers.conftest import IMAGE


@contextlib.contextmanager
def creations(client) -> Iterator[list[dict]]:
    """Yield a list that fills with every container ``create`` event of ``client``'s
    engine from now on; when the block ends, the list holds every one made in it.

    The stream is in the engine's order: at the end a marker container is created (never
    started) and removed, and once its event is read, every earlier one was read."""
    seen: list[dict] = []
    stream = client.events(filters={"type": "container", "event": "create"}, decode=True)
    marker_read = threading.Event()
    marker = f"gb-test-marker-{uuid.uuid4().hex[:12]}"

    def read() -> None:
        with contextlib.suppress(Exception):  # the stream closed at the end
            for event in stream:
                if event["Actor"]["Attributes"].get("name") == marker:
                    marker_read.set()
                else:
                    seen.append(event)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield seen
        made = client.create_container(IMAGE, command=["true"], name=marker)
        client.remove_container(made["Id"], force=True)
        assert marker_read.wait(60), f"the create event of {marker} never came"
    finally:
        stream.close()
        reader.join(10)


def created(seen: list[dict], **attributes: str) -> list[dict]:
    """The create events in ``seen`` whose container has these attributes (labels, name)."""
    return [
        event
        for event in list(seen)
        if all(event["Actor"]["Attributes"].get(k) == v for k, v in attributes.items())
    ]
