"""What a django-q2 worker process changes in django-q2 at its start (``outbox.forking``)."""

from __future__ import annotations

from django_q import worker

from outbox import forking


def test_a_worker_gives_its_connection_back_at_most_once_a_second(monkeypatch):
    """django-q2's per-task ``close_old_django_connections`` is throttled: the first task
    checks, the next ones within ``CONNECTION_CHECK_EVERY`` do not; once it has passed, the
    next task checks again. Installing it twice wraps once."""
    calls: list[int] = []
    monkeypatch.setattr(worker, "close_old_django_connections", lambda: calls.append(1))
    clock = [100.0]
    monkeypatch.setattr(forking.time, "monotonic", lambda: clock[0])
    forking.connection_checks_throttled()
    forking.connection_checks_throttled()
    for _ in range(3):
        worker.close_old_django_connections()
    assert len(calls) == 1
    clock[0] += forking.CONNECTION_CHECK_EVERY
    worker.close_old_django_connections()
    worker.close_old_django_connections()
    assert len(calls) == 2
