"""A Pod's output: its container's log, tailed or followed.

The official client is synchronous, so a follow runs its streaming response on a thread
of its own through ``follows.follow_in_thread`` (the bounded adapter Docker over ssh uses:
a slow reader stops the thread reading). ``close()`` shuts the response's socket down,
which ends a read blocked in another thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

CHUNK = 64 * 1024


class LogStream:
    """One log response (``_preload_content=False``) as a ``follows.BlockingStream``."""

    def __init__(self, response: Any) -> None:
        self.response = response

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.response.stream(CHUNK, decode_content=True)
        finally:
            self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.response.shutdown()  # ends a read blocked in another thread
        with contextlib.suppress(Exception):
            self.response.release_conn()
        with contextlib.suppress(Exception):
            self.response.close()
