"""The rows gobrave keeps for its own running: the gates that serialize global
decisions (``Gate``), containers found without an instance (``OrphanContainer``), where
each engine's event stream resumes (``MonitorCursor``) and this installation's identity
(``Installation``)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from containers.models.runtime import Runtime


class Gate(models.Model):
    """A named row that serializes a global decision across every process and host.

    ``admission`` is locked by every create request (maxPending), ``capacity`` by every
    move into ``creating``/``starting`` (maxConcurrency). Both rows are created by a
    migration; ``select_for_update()`` on PostgreSQL, the IMMEDIATE write lock on SQLite.
    """

    name = models.CharField(max_length=32, primary_key=True)

    def __str__(self) -> str:
        return self.name


class OrphanContainer(models.Model):
    """A container that carries our labels but has no instance (found by the reconciler)."""

    runtime = models.ForeignKey(Runtime, on_delete=models.CASCADE, related_name="orphans")
    container_id = models.CharField(max_length=128)
    name = models.CharField(max_length=255)
    labels = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=32, blank=True)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["runtime", "container_id"], name="orphan_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.runtime}"


class MonitorCursor(models.Model):
    """Where the monitor's event stream for one engine resumes (contract §5).

    ``position`` is the ``EngineEvent.cursor`` of the last applied event, opaque to
    everything but the driver that made it (Docker: its nanosecond time as a string;
    Kubernetes: a ``resourceVersion``); empty: no cursor yet. The stream is reopened from
    it (Docker's ``since`` is inclusive), and ``seen`` holds the keys of the events
    already applied at exactly ``position`` so that their replay is recognised as a
    duplicate. Written only by ``containers.execution.monitor``.
    """

    runtime = models.OneToOneField(Runtime, on_delete=models.CASCADE, related_name="cursor")
    position = models.CharField(max_length=200, default="", blank=True)
    seen = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.runtime} @ {self.position or '(none)'}"


class Installation(models.Model):
    """This installation's identity on the engines: the ``io.gobrave.installation`` label.

    One row (pk 1), made by the first ``migrate`` with a random id, so that two
    installations sharing an engine never take each other's containers for orphans.
    ``container.installation_id`` in config.yml, when set, wins over it
    (``containers.installation``). Never changed once made.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    installation_id = models.CharField(max_length=63, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.installation_id
