"""DAG runs: templates of nodes, runs of them, each node's run, and their history."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django_fsm import FSMField, FSMModelMixin, transition

from core.write_order import txid_field
from dags.states import NodeStatus, RunStatus, node_sources_of, run_sources_of


class DagTemplate(models.Model):
    """A graph of container runs, defined once and run many times.

    ``nodes`` is the validated list of ``dags.graph`` (template references stored as
    ids). Written through ``dags.services.dag_template_save`` only, which validates it
    (cycles named, unknown keys and templates, at most 200 nodes). Operators hold its
    add/change/delete permissions; users may list and start it only if they may use
    every container template in it.
    """

    name = models.CharField(max_length=128, unique=True)
    description = models.TextField(blank=True)
    nodes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "DAG template"

    def __str__(self) -> str:
        return self.name

    def template_ids(self) -> set[int]:
        return {int(node["template"]) for node in self.nodes}


class DagRun(FSMModelMixin, models.Model):
    """One run of a DAG template, and a snapshot of everything it runs.

    ``graph`` and ``templates`` are copies taken at start (nodes; container template
    fields by id), so editing either never changes a run under way. ``status`` is a
    protected django-fsm field (contract §7); it changes only in ``dags.services`` and
    ``dags.runner``, under this row's lock. ``runtime`` is the one engine every node
    runs on, chosen when the run starts.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    template = models.ForeignKey(
        DagTemplate, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    template_name = models.CharField(max_length=128)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="dag_runs"
    )
    status = FSMField(default=RunStatus.PENDING, choices=RunStatus.choices, protected=True)
    graph = models.JSONField(default=list)
    templates = models.JSONField(default=dict)
    runtime = models.ForeignKey(
        "containers.Runtime", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    reason = models.TextField(blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    workspace_removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "DAG run"
        indexes = [  # as ContainerInstance's: one per filter, in the lists' order
            models.Index(fields=["status"]),
            models.Index(fields=["owner", "-created_at"]),
            models.Index(fields=["created_at", "id"], name="dagrun_created"),
            models.Index(fields=["status", "created_at", "id"], name="dagrun_status_created"),
        ]

    def __str__(self) -> str:
        return f"{self.template_name} {str(self.id)[:8]}"

    @property
    def workspace_name(self) -> str:
        """The run's workspace volume, mounted at ``/dag`` in every node."""
        return f"gb-dag-{self.id}"

    def _changed(self, reason: str | None = None) -> None:
        self.status_changed_at = timezone.now()
        if reason is not None:
            self.reason = reason

    @transition(field=status, source=run_sources_of(RunStatus.RUNNING), target=RunStatus.RUNNING)
    def mark_running(self) -> None:
        self._changed("")
        self.started_at = self.started_at or timezone.now()
        self.finished_at = None

    @transition(
        field=status, source=run_sources_of(RunStatus.SUCCEEDED), target=RunStatus.SUCCEEDED
    )
    def mark_succeeded(self) -> None:
        self._changed("")
        self.finished_at = timezone.now()

    @transition(field=status, source=run_sources_of(RunStatus.FAILED), target=RunStatus.FAILED)
    def mark_failed(self, reason: str) -> None:
        self._changed(reason)
        self.finished_at = timezone.now()

    @transition(
        field=status, source=run_sources_of(RunStatus.CANCELLING), target=RunStatus.CANCELLING
    )
    def mark_cancelling(self, reason: str) -> None:
        self._changed(reason)

    @transition(
        field=status, source=run_sources_of(RunStatus.CANCELLED), target=RunStatus.CANCELLED
    )
    def mark_cancelled(self, reason: str = "") -> None:
        self._changed(reason or self.reason)
        self.finished_at = timezone.now()


class DagNodeRun(FSMModelMixin, models.Model):
    """One node of one run: where it is, and the instance of its current attempt.

    ``attempt`` counts every instance the node had (its id is derived from the run, the
    key and the attempt, so a create repeated after a crash finds the instance it
    made); ``tries`` counts those of the current pass, against ``retries``. The
    instance is referenced by id only (no foreign key), so deleting an instance never
    touches this row. ``output`` keeps a failed attempt's last output (``output_attempt``)
    once its container is to be removed. Changed only under the run's row lock.
    """

    run = models.ForeignKey(DagRun, on_delete=models.CASCADE, related_name="nodes")
    key = models.CharField(max_length=63)
    status = FSMField(default=NodeStatus.WAITING, choices=NodeStatus.choices, protected=True)
    depends_on = models.JSONField(default=list)
    retries = models.PositiveIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=0)
    tries = models.PositiveIntegerField(default=0)
    instance_id = models.UUIDField(null=True, blank=True)
    instance_name = models.CharField(max_length=128, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.TextField(blank=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The last output of a failed attempt, kept before the runner has its container
    # removed (``dags.runner``): at most ``OUTPUT_KEPT_BYTES``, or a note saying why not.
    output = models.TextField(blank=True)
    output_attempt = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["run", "id"]
        verbose_name = "DAG node run"
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="dag_node_unique")]

    def __str__(self) -> str:
        return f"{self.key} [{self.status}]"

    def _changed(self, reason: str = "") -> None:
        self.status_changed_at = timezone.now()
        self.reason = reason

    @transition(field=status, source=node_sources_of(NodeStatus.READY), target=NodeStatus.READY)
    def mark_ready(self, reason: str = "") -> None:
        self._changed(reason)

    @transition(field=status, source=node_sources_of(NodeStatus.RUNNING), target=NodeStatus.RUNNING)
    def mark_running(self, *, instance_id: uuid.UUID, instance_name: str) -> None:
        self._changed()
        self.instance_id = instance_id
        self.instance_name = instance_name
        self.exit_code = None
        self.started_at = timezone.now()
        self.finished_at = None

    @transition(
        field=status, source=node_sources_of(NodeStatus.SUCCEEDED), target=NodeStatus.SUCCEEDED
    )
    def mark_succeeded(self, exit_code: int | None = 0) -> None:
        self._changed()
        self.exit_code = exit_code
        self.finished_at = timezone.now()

    @transition(field=status, source=node_sources_of(NodeStatus.FAILED), target=NodeStatus.FAILED)
    def mark_failed(self, reason: str, exit_code: int | None = None) -> None:
        self._changed(reason)
        self.exit_code = exit_code
        self.finished_at = timezone.now()

    @transition(field=status, source=node_sources_of(NodeStatus.SKIPPED), target=NodeStatus.SKIPPED)
    def mark_skipped(self, reason: str) -> None:
        self._changed(reason)
        self.finished_at = timezone.now()

    @transition(
        field=status, source=node_sources_of(NodeStatus.CANCELLED), target=NodeStatus.CANCELLED
    )
    def mark_cancelled(self, reason: str = "cancelled") -> None:
        self._changed(reason)
        self.finished_at = self.finished_at or timezone.now()

    @transition(field=status, source=node_sources_of(NodeStatus.WAITING), target=NodeStatus.WAITING)
    def mark_waiting(self, reason: str = "") -> None:
        self._changed(reason)
        self.exit_code = None
        self.tries = 0
        self.finished_at = None

    def transition_method(self, target: str):
        return getattr(self, f"mark_{target}")


class DagEvent(models.Model):
    """Append-only history of a run and its nodes (``node`` blank for the run itself).

    Keeps the run's id as a plain value, so the history outlives the run's row, and its
    owner the same way (no database constraint); ``txid`` is the writing transaction
    (``core.write_order``), for the events feed.
    """

    run_id = models.UUIDField(db_index=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    node = models.CharField(max_length=63, blank=True)
    kind = models.CharField(max_length=64)
    from_status = models.CharField(max_length=32, blank=True)
    to_status = models.CharField(max_length=32, blank=True)
    message = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    txid = txid_field()

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name = "DAG event"
        indexes = [
            # A run's history page, newest first, however long the history.
            models.Index(fields=["run_id", "created_at", "id"], name="dagevent_run_history"),
            # The events feed (events.selectors) in its order, and by owner.
            models.Index(fields=["txid", "id"], name="dagevent_feed"),
            models.Index(fields=["owner", "txid", "id"], name="dagevent_feed_owner"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.run_id} {self.node or 'run'}: {self.kind} {self.from_status}->{self.to_status}"
        )
