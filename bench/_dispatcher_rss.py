"""``manage.py run_dispatcher`` with a cycle counter, for the scale benchmark.

Runs ``outbox.dispatcher.Dispatcher().run()`` (what ``run_dispatcher`` runs) in this
process, counts its cycles, prints ``cycle RSS_KiB`` at cycles 1, 10, 100, 1000, ... and
at the last, and stops itself after N cycles (or on SIGTERM).

    python bench/_dispatcher_rss.py N
"""

from __future__ import annotations

import os
import sys

import _common as c
import django


def main() -> None:
    cycles = int(sys.argv[1])
    django.setup()
    from outbox.dispatcher import Dispatcher

    dispatcher = Dispatcher()
    dispatcher.install_signal_handlers()
    count = [0]
    original = dispatcher.cycle
    marks = {1, 10, 100, 1000, 10_000, 100_000, cycles}

    def cycle() -> int:
        handed = original()
        count[0] += 1
        if count[0] in marks:
            print(f"{count[0]} {c.rss_kib(os.getpid())}", flush=True)
        if count[0] >= cycles:
            dispatcher.stop()
        return handed

    dispatcher.cycle = cycle
    dispatcher.run()


if __name__ == "__main__":
    main()
