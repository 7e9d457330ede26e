"""A create cluster's claim path without its workers (the latency benchmark's claimer).

With the shipped config on PostgreSQL, a commit is claimed by the pusher of the queue's
cluster: ``outbox.broker.OutboxBroker.dequeue()`` wakes on NOTIFY and claims. This runs
that loop alone and drops the tasks it returns, so the claimed rows stay claimed for the
bench to read. SIGTERM stops it (``_common`` turns it into KeyboardInterrupt).

    python bench/_pusher.py
"""

from __future__ import annotations

import _common  # noqa: F401 - puts the repository on sys.path, SIGTERM -> KeyboardInterrupt
import django


def main() -> None:
    django.setup()
    from outbox.broker import OutboxBroker

    broker = OutboxBroker("create")
    try:
        while True:
            broker.dequeue()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
