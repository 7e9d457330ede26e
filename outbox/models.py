"""The outbox table: requests written in the caller's transaction, relayed later."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.sql import UpdateQuery
from django_fsm import FSMField, FSMModelMixin, transition


class OutboxStatus(models.TextChoices):
    PENDING = "pending"
    PROCESSING = "processing"
    SENT = "sent"
    DEAD = "dead"


S = OutboxStatus

# The one table of allowed moves (contract §3). The model's transitions and every
# compare-and-set of the relay (``OutboxQuerySet.move_to``) take their sources from it.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.PROCESSING}),  # claim
    # an expired lease reclaimed under a new token; success or superseded; deferred or
    # retrying; a permanent error or the last attempt
    S.PROCESSING: frozenset({S.PROCESSING, S.SENT, S.PENDING, S.DEAD}),
    S.SENT: frozenset(),
    S.DEAD: frozenset(),
}

UNFINISHED = (OutboxStatus.PENDING, OutboxStatus.PROCESSING)


def sources_of(target: str) -> list[str]:
    """Every status from which ``target`` may be reached, in declaration order."""
    return [source for source in OutboxStatus if target in TRANSITIONS[source]]


def can_move(source: str, target: str) -> bool:
    return target in TRANSITIONS.get(source, frozenset())


class OutboxQuerySet(models.QuerySet):
    def move_to(self, target: str, **fields) -> int:
        """Compare-and-set: move the rows of this queryset that may reach ``target``.

        One ``UPDATE ... WHERE <filters> AND status IN (sources of target)``: a row in
        any other status is left alone (and not counted). Returns how many moved.
        """
        return self.filter(status__in=sources_of(target)).update(status=target, **fields)

    def move_to_sql(self, target: str, connection, **fields) -> tuple[str, tuple]:
        """The ``UPDATE`` that ``move_to`` would run, as SQL and parameters (unexecuted),
        for a caller that sends it inside a larger statement."""
        query = self.filter(status__in=sources_of(target)).query.chain(UpdateQuery)
        query.add_update_values({"status": target, **fields})
        query.annotations = {}
        return query.get_compiler(connection=connection).as_sql()


class OutboxEvent(FSMModelMixin, models.Model):
    """One request to relay, written in the same transaction as the change that caused it.

    ``status`` is a protected django-fsm field: its transitions below are built from
    ``TRANSITIONS``, and the relay's bulk compare-and-sets go through
    ``OutboxQuerySet.move_to``, which allows exactly the same moves.

    Guarantees (see ``outbox.services`` and ``outbox.relay``):
    - ``id`` orders rows; rows of one ``aggregate_id`` run in ``id`` order, one at a time.
    - A row in ``processing`` belongs to the holder of ``claim_token`` until
      ``lease_expires_at``; outcomes are recorded only under a matching token.
    - ``started_at`` is set once per claim, by compare-and-set, before the handler runs.
    - ``resolved_at`` is set only on a ``dead`` row, once, when an operator dismissed it
      (or a requeue replaced it); the status does not change (``dead`` is final).
    """

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=64, db_index=True)
    queue = models.CharField(max_length=32, help_text="The worker cluster that runs this kind.")
    aggregate_id = models.CharField(max_length=64, help_text="The entity this request is for.")
    fairness_key = models.CharField(
        max_length=64,
        blank=True,
        default="",
        db_default="",  # rows inserted by plain SQL (benchmarks) get it too
        help_text="Rows are served round-robin across keys (e.g. the requester).",
    )
    payload = models.JSONField(default=dict, blank=True)
    status = FSMField(
        max_length=16, choices=OutboxStatus.choices, default=OutboxStatus.PENDING, protected=True
    )
    attempts = models.PositiveIntegerField(default=0)
    reclaims = models.PositiveIntegerField(
        default=0,
        help_text="Times a claim ran out before any worker began it (a wedged or gone cluster).",
    )
    available_at = models.DateTimeField()
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.UUIDField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    outcome = models.CharField(max_length=32, blank=True, help_text="sent, superseded, dead")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # A dead letter an operator dealt with (``outbox.services.outbox_dead_resolve``): it
    # stays for diagnosis until ``retention.dead_letters_resolved`` after this.
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)

    objects = OutboxQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [
            # The claim's scan: due pending rows in id order, tiny however big the table.
            models.Index(
                fields=["available_at", "id"],
                name="outbox_due_pending",
                condition=Q(status="pending"),
            ),
            # Expired leases, and the in-flight count per queue.
            models.Index(
                fields=["queue", "lease_expires_at"],
                name="outbox_processing",
                condition=Q(status="processing"),
            ),
            # "Is there an older unfinished row of this aggregate?"
            models.Index(
                fields=["aggregate_id", "id"],
                name="outbox_unfinished_by_aggregate",
                condition=Q(status__in=["pending", "processing"]),
            ),
            # Fair share: the distinct keys with pending rows, and each key's oldest row.
            models.Index(
                fields=["queue", "fairness_key", "id"],
                name="outbox_pending_by_key",
                condition=Q(status="pending"),
            ),
            # Dead letters (few; counted by the queue stats and /metrics).
            models.Index(fields=["id"], name="outbox_dead", condition=Q(status="dead")),
            # Retention purge.
            models.Index(fields=["sent_at"], name="outbox_sent", condition=Q(status="sent")),
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.kind} {self.aggregate_id} [{self.status}]"

    # --- transitions (the table above); the relay's writes are ``move_to`` ---------------

    @transition(field=status, source=sources_of(S.PROCESSING), target=S.PROCESSING)
    def mark_processing(self) -> None:
        """Claimed (from pending), or reclaimed after its lease ran out."""

    @transition(field=status, source=sources_of(S.SENT), target=S.SENT)
    def mark_sent(self) -> None:
        """Handled (or superseded)."""

    @transition(field=status, source=sources_of(S.PENDING), target=S.PENDING)
    def mark_pending(self) -> None:
        """Deferred or retrying: due again later."""

    @transition(field=status, source=sources_of(S.DEAD), target=S.DEAD)
    def mark_dead(self) -> None:
        """Gave up: a permanent error or the last attempt."""

    def transition_method(self, target: str):
        """The bound transition method that moves this row to ``target``."""
        return getattr(self, f"mark_{target}")


class FairnessMark(models.Model):
    """When a fairness key of a queue was last served (its ``turn``), for round-robin.

    Written by the claim, inside its transaction: the rows it claims give their keys the
    next turns, in the order served; only the order counts, so keys that already hold the
    last turns in that order are not rewritten (``served_at`` is when the key last moved).
    A key with no mark has never been served and goes first. One row per key ever served
    on the queue.
    """

    queue = models.CharField(max_length=32)
    key = models.CharField(max_length=64)
    turn = models.BigIntegerField(default=0)
    served_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "key"], name="fairness_unique")]
        indexes = [models.Index(fields=["queue", "turn"], name="fairness_turn")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.key or '-'} turn {self.turn}"


class DispatcherBeat(models.Model):
    """A running process's liveness mark, renewed every ``poll_interval``: a
    dispatcher's, a cluster's pusher's or the monitor's (``kind``).

    Written only by ``outbox.liveness``. A dispatcher that starts when none of the
    installation's processes has been alive for ten poll intervals is at a cold start
    (see there). Times are the database's clock.
    """

    name = models.CharField(max_length=128, primary_key=True)
    kind = models.CharField(max_length=16, default="dispatcher")
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} @ {self.beat_at}"
