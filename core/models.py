"""The shared kernel's tables: per-minute named counters, and leases that expire."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


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


class Lease(models.Model):
    """A row that counts until ``expires_at``, unless renewed: what every web process and
    host counts together (open streams, API throttle windows), written by
    ``core.leases`` only.

    Two kinds share the table, in scopes of their own (a scope holds one kind):

    - a **lease** (``key`` empty): one row per holder's place (an open stream), made by
      ``lease_acquire`` under the scope's limits and kept by ``lease_renew``. A process
      killed while holding one leaks nothing: its rows stop counting at ``expires_at``
      and the next acquire of the scope deletes them.
    - a **throttle window** (``key`` names the window): one row per (scope, holder,
      window) whose ``count`` every hit adds to in one statement; unique, so hits of
      every process land on the same row.

    ``expires_at`` is on the database's clock (PostgreSQL), the one clock every host
    shares. Indexed for the live counts: per scope, and per scope and holder.
    """

    scope = models.CharField(max_length=64)
    holder = models.CharField(max_length=128)
    key = models.CharField(max_length=64, blank=True, default="")
    count = models.PositiveBigIntegerField(default=1)
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "holder", "key"],
                condition=~Q(key=""),
                name="lease_window_unique",
            )
        ]
        indexes = [
            models.Index(fields=["scope", "expires_at"], name="lease_scope_expires"),
            models.Index(fields=["scope", "holder", "expires_at"], name="lease_holder_expires"),
        ]

    def __str__(self) -> str:
        what = f"{self.scope} {self.holder}" + (f" {self.key}={self.count}" if self.key else "")
        return f"{what} until {self.expires_at:%H:%M:%S}"


class Tally(models.Model):
    """A running count by ``(name, key)``, kept as signed deltas that add up to it.

    Written only by database triggers (each app's migration installs its own, naming its
    tallies ``<app>.<what>``) and by ``core.tallies.tallies_fold``; read by
    ``core.tallies.tally_read``. A change appends a row: no writer ever updates a row
    another writer holds, so transitions never queue behind each other for a count. The
    fold sums the rows into one per key, so a read sums a few rows per key however large
    the counted table grows (PostgreSQL only; on SQLite nothing writes here and readers
    count the table itself).
    """

    name = models.CharField(max_length=64)
    key = models.CharField(max_length=128)
    n = models.BigIntegerField(default=0)
    total = models.FloatField(default=0.0)

    class Meta:
        indexes = [models.Index(fields=["name", "key"], name="tally_name_key")]

    def __str__(self) -> str:
        return f"{self.name} {self.key} {self.n:+d}"
