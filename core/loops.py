"""What every long-running loop shares: SIGTERM or SIGINT asks it to stop.

The signal only sets ``stopping``; the loop notices it between steps and finishes the
step it is in (the dispatcher, the cluster supervisor, the engine monitor).
"""

from __future__ import annotations

import signal
import threading


class StopOnSignal:
    """``stop()`` sets ``stopping`` (a ``threading.Event`` the subclass creates);
    ``install_signal_handlers()`` makes SIGTERM and SIGINT call it."""

    stopping: threading.Event

    def stop(self, *_args: object) -> None:
        self.stopping.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
