"""One container gobrave manages: the ``ContainerInstance`` row and its lifecycle's
transitions (guards and fields only)."""

from __future__ import annotations

import datetime as dt
import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from django_fsm import FSMField, FSMModelMixin, transition

from containers.models.runtime import Runtime
from containers.models.template import ContainerTemplate
from containers.states import Status, sources_of


class ContainerInstance(FSMModelMixin, models.Model):
    """One container gobrave manages, and where it is in its lifecycle.

    ``status`` is a protected django-fsm field: it changes only through the transition
    methods below, whose allowed sources come from ``containers.states.TRANSITIONS``.
    Transition methods set fields and nothing else (no I/O, no enqueueing); services
    call them on a row they hold with ``select_for_update()`` and save with
    ``update_fields``. ``spec`` is the resolved container spec, fixed at request time;
    workers use only it.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=128)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="containers"
    )
    template = models.ForeignKey(
        ContainerTemplate, on_delete=models.PROTECT, related_name="instances"
    )
    # Empty while ``pending`` (a create is placed when it takes its slot:
    # ``containers.placement``), except for a create pinned to an engine (a DAG run's node);
    # once its container exists the instance keeps its engine for life.
    runtime = models.ForeignKey(
        Runtime, on_delete=models.PROTECT, related_name="instances", null=True, blank=True
    )
    placement_reason = models.CharField(
        max_length=255, blank=True, help_text="Why the instance went to its engine."
    )
    status = FSMField(default=Status.PENDING, choices=Status.choices, protected=True)
    container_id = models.CharField(max_length=128, blank=True, help_text="The engine's id.")
    runtime_node_name = models.CharField(max_length=255, blank=True)
    runtime_missing = models.BooleanField(
        default=False, help_text="The engine no longer has this container."
    )
    # The engine accepted the container and made it wait for room of its own (a Pod
    # waiting for a node) since then: from then until its next transition the instance
    # holds no create/start slot (it passed the capacity gate once; the engine has it
    # now). While ``engine_placed_at`` is empty it still waits: ``start_timeout`` does not
    # run and ``unschedulable_timeout`` may bound it. Once the engine found it room
    # (``engine_placed_at``: the Pod was scheduled) ``start_timeout`` runs again, the wait
    # not counted. Written by ``execution.sync``; every transition clears both.
    engine_waiting_since = models.DateTimeField(null=True, blank=True)
    engine_placed_at = models.DateTimeField(null=True, blank=True)
    # The engine has had no word from the node that holds the container (a Pod
    # ``Unknown``: its node stopped reporting while the API server answers) since then.
    # The instance keeps its state meanwhile; past ``engine_lost_after`` it is given up
    # (``execution.engine_loss.instance_node_lost``). Written by ``execution.sync``,
    # cleared when the node reports again; every transition clears it.
    engine_silent_since = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    status_reason = models.TextField(blank=True)
    spec = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Lifecycle policies (``containers.execution.policies``), armed by the transitions from
    # ``spec["policy"]`` (DAG nodes have none): when the policy pass stops this run
    # (max_lifetime, pushed back by ``extended_seconds``), since when its container has
    # been idle (idle_timeout; null: not watched, and only a running instance is: leaving
    # ``running`` clears it, an unpause or a start arms it again), and when it deletes the
    # stopped instance (delete_stopped_after). Each has a partial index: a pass reads only
    # the due rows.
    stop_at = models.DateTimeField(null=True, blank=True)
    extended_seconds = models.PositiveIntegerField(default=0)
    idle_since = models.DateTimeField(null=True, blank=True)
    cpu_sample = models.JSONField(null=True, blank=True, editable=False)
    # When the idle watch last took this row's turn (measured or not: an engine that
    # gives no figure for it, or does not answer, does not keep it first in line).
    idle_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    delete_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # The lists' default order is newest first, ties on the id (core.api.pagination):
        # each filter a list takes has an index in that order, so a page reads its rows
        # from the index and stops (docs/benchmarks.md, "Reads at 100,000 rows").
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["owner", "-created_at"]),
            models.Index(fields=["created_at", "id"], name="instance_created"),
            models.Index(fields=["status", "created_at", "id"], name="instance_status_created"),
            models.Index(fields=["template", "created_at"], name="instance_template_created"),
            models.Index(fields=["runtime", "created_at"], name="instance_runtime_created"),
            models.Index(fields=["name", "id"], name="instance_name"),
            models.Index(
                fields=["stop_at"],
                name="instance_policy_stop",
                condition=models.Q(stop_at__isnull=False),
            ),
            # The idle watch's turn: the watched rows, the longest unchecked first (never
            # checked: since their run began).
            models.Index(
                Coalesce("idle_checked_at", "idle_since"),
                F("id"),
                name="instance_policy_idle_turn",
                condition=models.Q(idle_since__isnull=False),
            ),
            models.Index(
                fields=["delete_at"],
                name="instance_policy_delete",
                condition=models.Q(delete_at__isnull=False),
            ),
            # The reconciler's turn through the stopped instances, and its look-up of the
            # stopped ones the engine lists running (``reconciler._stopped_rows``).
            models.Index(
                fields=["runtime", "id"],
                name="instance_stopped_turn",
                condition=Q(status="stopped"),
            ),
            models.Index(
                fields=["runtime", "container_id"],
                name="instance_stopped_container",
                condition=Q(status="stopped"),
            ),
            # Failed instances whose node name the reconciler still backfills (few).
            models.Index(
                fields=["runtime"],
                name="instance_failed_unplaced",
                condition=Q(status="failed", runtime_node_name="") & ~Q(container_id=""),
            ),
        ]
        constraints = [
            # An owner's names are unique while the rows exist: a delete frees the name
            # when it removes the row (a failed delete gives the instance back its name).
            models.UniqueConstraint(fields=["owner", "name"], name="instance_name_per_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def container_name(self) -> str:
        """The deterministic engine-side name: the same on every retry."""
        return f"gb-{self.id}"

    # --- transitions: guards and fields only -------------------------------------------

    def _changed(self, reason: str = "") -> None:
        self.status_changed_at = timezone.now()
        self.status_reason = reason
        # A wait for room on the engine belongs to the state it happened in.
        self.engine_waiting_since = self.engine_placed_at = None
        # So does the silence of its node: a look after the move starts it again.
        self.engine_silent_since = None

    def _policy(self) -> dict:
        return (self.spec or {}).get("policy") or {}

    def _arm_run_policies(self) -> None:
        """A run begins: its max_lifetime deadline, its idle watch; no delete pending."""
        policy, now = self._policy(), timezone.now()
        lifetime = policy.get("max_lifetime")
        self.stop_at = now + dt.timedelta(seconds=lifetime) if lifetime else None
        self.extended_seconds = 0
        self._arm_idle_watch()
        self.delete_at = None

    def _arm_idle_watch(self) -> None:
        """The idle watch (re)starts: idle from now, no sample yet (the first look only
        takes one), so what happened before (a pause) is never averaged in."""
        self.idle_since = timezone.now() if self._policy().get("idle_timeout") else None
        self.cpu_sample = None

    def _end_idle_watch(self) -> None:
        """The instance leaves ``running``: only running rows are watched, so only they
        are in the idle watch's index (``instance_policy_idle_turn``)."""
        self.idle_since = self.cpu_sample = None

    def _arm_rest_policies(self) -> None:
        """A run ended: no stop due; delete_stopped_after from now, where set."""
        after = self._policy().get("delete_stopped_after")
        self.stop_at = self.idle_since = self.cpu_sample = None
        self.delete_at = timezone.now() + dt.timedelta(seconds=after) if after else None

    @transition(field=status, source=sources_of(Status.CREATING), target=Status.CREATING)
    def mark_creating(self) -> None:
        self._changed()

    @transition(field=status, source=sources_of(Status.RUNNING), target=Status.RUNNING)
    def mark_running(self) -> None:
        self._changed()
        self.started_at = timezone.now()
        self.finished_at = None
        self.exit_code = None
        if self.status != Status.PAUSED:  # (still the source here)
            self._arm_run_policies()
        else:  # an unpause is the same run: its time limit stands, its idle watch restarts
            self._arm_idle_watch()

    @transition(field=status, source=sources_of(Status.PAUSED), target=Status.PAUSED)
    def mark_paused(self) -> None:
        self._changed()
        self._end_idle_watch()

    @transition(field=status, source=sources_of(Status.STOP_PENDING), target=Status.STOP_PENDING)
    def mark_stop_pending(self) -> None:
        self._changed()
        self._end_idle_watch()

    @transition(field=status, source=sources_of(Status.STOPPING), target=Status.STOPPING)
    def mark_stopping(self) -> None:
        self._changed()

    @transition(field=status, source=sources_of(Status.STOPPED), target=Status.STOPPED)
    def mark_stopped(self, exit_code: int | None = None, reason: str = "") -> None:
        self._changed(reason)
        self.exit_code = exit_code
        self.finished_at = timezone.now()
        self._arm_rest_policies()

    @transition(field=status, source=sources_of(Status.START_PENDING), target=Status.START_PENDING)
    def mark_start_pending(self) -> None:
        self._changed()
        self._end_idle_watch()

    @transition(field=status, source=sources_of(Status.STARTING), target=Status.STARTING)
    def mark_starting(self) -> None:
        self._changed()

    @transition(
        field=status, source=sources_of(Status.DELETE_PENDING), target=Status.DELETE_PENDING
    )
    def mark_delete_pending(self) -> None:
        self._changed()
        self.stop_at = self.idle_since = self.cpu_sample = self.delete_at = None

    @transition(field=status, source=sources_of(Status.DELETING), target=Status.DELETING)
    def mark_deleting(self) -> None:
        self._changed()

    @transition(field=status, source=sources_of(Status.FAILED), target=Status.FAILED)
    def mark_failed(self, reason: str, exit_code: int | None = None) -> None:
        self._changed(reason)
        if exit_code is not None:
            self.exit_code = exit_code
        self.finished_at = timezone.now()
        self._arm_rest_policies()

    def transition_method(self, target: str):
        """The bound transition method that moves this instance to ``target``."""
        return getattr(self, f"mark_{target}")
