"""An owner's workspace that gobrave made on one engine (``Workspace``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from containers.models.runtime import Runtime


class Workspace(models.Model):
    """An owner's workspace that gobrave made on one engine (SPEC section 8).

    A row means the volume or directory exists there, owned by the owner's uid and gid
    with mode 2770: the worker makes it before the first create that mounts it, and
    later creates find the row and pay nothing (``containers.execution.workspaces``). Never
    deleted by gobrave on its own unless ``workspace_retention`` is set (off by default): it
    holds the owner's files; an operator may remove a volume workspace of an owner who has
    no instances left (``workspace_remove``), and so does that policy. The
    same rows record the volumes
    gobrave adds to a spec and owns like a workspace (a DAG run's ``/dag``): those go,
    row first, with their volume (``containers.execution.housekeeping.volume_remove``).
    """

    runtime = models.ForeignKey(Runtime, on_delete=models.CASCADE, related_name="workspaces")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workspaces"
    )
    kind = models.CharField(max_length=16, choices=Runtime.WorkspaceDriver.choices)
    source = models.CharField(max_length=512, help_text="The volume name or host directory.")
    uid = models.BigIntegerField()
    gid = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    # What the engine last said it holds (``workspace_sizes_refresh``): pages never ask.
    size_bytes = models.BigIntegerField(null=True, blank=True)
    size_checked_at = models.DateTimeField(null=True, blank=True)
    # Since when its owner has had no instance (the workspace_retention policy; null:
    # in use, or not looked at). Written only by ``containers.execution.policies``.
    unused_since = models.DateTimeField(null=True, blank=True)
    # How long it is kept once unused (``containers.execution.policies``): the longest
    # of the workspace_retention of the deleted instances that mounted it, each its
    # template's own value (``retention``: the longest of those, 0 if any was 0, i.e.
    # kept; null: none had one) or config.yml's (``retention_default``: true if an
    # instance took it; null: no instance recorded yet, so config.yml's applies).
    # Written when an instance is deleted (``workspaces.workspace_retention_note``).
    retention = models.PositiveIntegerField(null=True, blank=True)
    retention_default = models.BooleanField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["runtime", "owner", "source"], name="workspace_unique")
        ]
        indexes = [
            # The workspace_retention pass reads the unused ones only.
            models.Index(
                fields=["unused_since"],
                name="workspace_unused",
                condition=models.Q(unused_since__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"{self.source} on {self.runtime}"
