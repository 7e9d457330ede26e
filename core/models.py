"""The shared kernel's one table: per-minute named counters."""

from __future__ import annotations

from django.db import models


class Counter(models.Model):
    """How many times something happened in one minute, by name.

    Generic: each app names its counters in its own enum (``outbox.counters.RelayStat``,
    ``containers.counters.RequestStat``) and bumps them with ``core.counters.counter_bump``,
    an ``F()`` update, so every process adds to the same row. The dashboard, the API and
    ``/metrics`` read them.
    """

    minute = models.DateTimeField()
    name = models.CharField(max_length=32)
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["minute", "name"], name="counter_unique")]
        indexes = [models.Index(fields=["name", "minute"], name="counter_name_minute")]

    def __str__(self) -> str:
        return f"{self.minute:%H:%M} {self.name}={self.count}"
