"""Fill in the owner of the history entries written before 0026, in batches: the history
table stays writable throughout (``core.batches``; each statement commits on its own).

1. Entries of instances that still exist: their owner.
2. Entries of deleted instances: their owner, where it can still be known exactly
   (``deleted_owners``): the owner's id that the instance's requests carry in the outbox
   (their ``fairness_key``, kept ``retention`` after they were sent), else, for an
   instance a DAG run made, its run's owner (the instance's id is derived from the run,
   the node and the attempt, and its name from the same).
3. Entries of deleted instances still without one: the user whose request created the
   instance (the create entry's actor, ``user:<name>``) if that user is neither staff
   nor a superuser: such a user can only create for themselves (the API's create is the
   caller's own; only staff create for others, in the admin or with ``manage.py``).
   Otherwise the entries keep no owner: operators see them, their owner does not.

Before it was fixed this migration gave every deleted instance's entries to its creator,
staff included; 0033 (``0033_event_owner_of_deleted_instances``) corrects those where
step 2 knows the owner.
"""

import re
import uuid

from django.db import migrations
from django.db.models import Exists, OuterRef, Q, Subquery
from django.db.models.functions import Substr

from core.batches import update_in_batches

BATCH = 5000
CHUNK = 1000  # instance ids per UPDATE of step 2
REQUEST_KINDS = (
    "ContainerCreateRequest",
    "ContainerStartRequest",
    "ContainerStopRequest",
    "ContainerDeleteRequest",
)
# ``dags.history``'s namespace of node instance ids (uuid5 of "<run>/<key>/<attempt>"),
# copied: a migration must not change when the app's code does.
DAG_IDS = uuid.UUID("5d1f3b0e-7a52-4c3e-9f0b-9a8d1c2e4f60")
NODE_NAME = re.compile(r"^([0-9a-f]{8})-(.+)-([0-9]+)$")  # "<run id's first 8>-<key>-<attempt>"


def deleted_instances(apps, events):
    """``{instance id: name}`` of the deleted instances that ``events`` are about."""
    instance = apps.get_model("containers", "ContainerInstance")
    live = instance.objects.filter(id=OuterRef("instance_id"))
    rows = events.exclude(Exists(live)).order_by().values_list("instance_id", "instance_name")
    return dict(rows.distinct().iterator())


def deleted_owners(apps, instances):
    """``{instance id: owner id}`` for those of ``instances`` (``{id: name}``, deleted)
    whose owner is known exactly: from their request rows in the outbox, else from
    their DAG run. Reads the outbox's request rows once (its ``kind`` index) and the
    runs whose id begins as a node's name does (primary-key ranges)."""
    outbox = apps.get_model("outbox", "OutboxEvent")
    run = apps.get_model("dags", "DagRun")
    wanted = {str(key): key for key in instances}
    found = {}
    requests = outbox.objects.filter(kind__in=REQUEST_KINDS, fairness_key__regex=r"^[0-9]{1,18}$")
    for aggregate, key in requests.values_list("aggregate_id", "fairness_key").iterator():
        if aggregate in wanted:
            found.setdefault(wanted[aggregate], int(key))
    nodes = {}
    for instance_id, name in instances.items():
        match = NODE_NAME.match(name or "")
        if instance_id not in found and match:
            nodes[instance_id] = match.groups()
    prefixes = sorted({prefix for prefix, _, _ in nodes.values()})
    runs = {}
    for start in range(0, len(prefixes), 500):
        ranges = Q()
        for prefix in prefixes[start : start + 500]:
            low, high = uuid.UUID(prefix + "0" * 24), uuid.UUID(prefix + "f" * 24)
            ranges |= Q(id__gte=low, id__lte=high)
        for run_id, owner_id in run.objects.filter(ranges).values_list("id", "owner_id"):
            runs.setdefault(str(run_id)[:8], []).append((run_id, owner_id))
    for instance_id, (prefix, key, attempt) in nodes.items():
        for run_id, owner_id in runs.get(prefix, ()):
            if uuid.uuid5(DAG_IDS, f"{run_id}/{key}/{int(attempt)}") == instance_id:
                found[instance_id] = owner_id
    user = apps.get_model(*_user_model().split("."))
    exists = set(user.objects.filter(pk__in=set(found.values())).values_list("pk", flat=True))
    return {key: owner for key, owner in found.items() if owner in exists}


def owners_set(events, owners) -> int:
    """Give ``events`` of each instance in ``owners`` (``{id: owner id}``) that owner,
    ``CHUNK`` instances a statement (the history's instance index). Returns the rows."""
    by_owner = {}
    for instance_id, owner_id in owners.items():
        by_owner.setdefault(owner_id, []).append(instance_id)
    changed = 0
    for owner_id, ids in sorted(by_owner.items()):
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            changed += (
                events.filter(instance_id__in=chunk)
                .exclude(owner_id=owner_id)
                .update(owner_id=owner_id)
            )
    return changed


def _user_model() -> str:
    from django.conf import settings

    return settings.AUTH_USER_MODEL


def backfill(apps, schema_editor):
    event = apps.get_model("containers", "ContainerEvent")
    instance = apps.get_model("containers", "ContainerInstance")
    user = apps.get_model(*_user_model().split("."))
    missing = event.objects.filter(owner__isnull=True)
    live = instance.objects.filter(id=OuterRef("instance_id")).values("owner_id")[:1]
    update_in_batches(missing, batch=BATCH, owner_id=Subquery(live))
    missing = event.objects.filter(owner__isnull=True)
    owners_set(missing, deleted_owners(apps, deleted_instances(apps, missing)))
    creator = (
        event.objects.filter(
            instance_id=OuterRef(OuterRef("instance_id")),
            kind="ContainerCreateRequest",
            actor__startswith="user:",
        )
        .annotate(name=Substr("actor", 6))
        .values("name")[:1]
    )
    by_name = user.objects.filter(
        username=Subquery(creator), is_staff=False, is_superuser=False
    ).values("id")[:1]
    update_in_batches(
        event.objects.filter(owner__isnull=True), batch=BATCH, owner_id=Subquery(by_name)
    )


class Migration(migrations.Migration):
    atomic = False  # each batch commits on its own

    dependencies = [
        ("containers", "0026_event_owner_and_txid"),
        ("outbox", "0004_fair_share"),  # the requests' fairness_key: their owner's id
        ("dags", "0001_initial"),
    ]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
