"""Extending a running instance's time limit (the max_lifetime policy's stop).

The template says who may (``extendable_by``: nobody, owner, staff) and by how much in
all per run (``extend_max``), as resolved into the instance's ``spec["policy"]`` at its
create. The API's ``extend`` action, the admin's action and ``container_extend`` callers
all come here.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from containers.errors import ExtensionNotAllowed, ExtensionRefused, InvalidSpec, NotFound
from containers.models import ContainerInstance
from containers.requests.lifecycle import instance_lock, instance_save, record
from containers.spec.policies import may_extend
from containers.states import Status

MOST_SECONDS = 366 * 86400


def container_extend(
    *, instance_id: uuid.UUID | str, user: AbstractBaseUser, seconds: int, actor: str
) -> ContainerInstance:
    """Push the running instance's ``stop_at`` back by ``seconds``.

    In one transaction on the instance's locked row: refuse (nothing changed) when
    ``seconds`` is not a whole number from 1 (``InvalidSpec``), when the caller may not
    (``ExtensionNotAllowed``), when the instance is not running or paused under a
    max_lifetime, or when the run's extensions would pass ``extend_max``
    (``ExtensionRefused``, with what is left); otherwise move ``stop_at``, add to
    ``extended_seconds`` and record an ``extend`` entry in the history. Not idempotent:
    each call extends again (within ``extend_max``).
    """
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int)
        or not 1 <= seconds <= MOST_SECONDS
    ):
        raise InvalidSpec(f"seconds: a whole number from 1 to {MOST_SECONDS}", field="seconds")
    with transaction.atomic():
        try:
            instance = instance_lock(instance_id)
        except ValueError:
            instance = None
        if instance is None:
            raise NotFound(f"no container instance {instance_id}", id=str(instance_id))
        policy = instance.spec.get("policy") or {}
        if not may_extend(policy=policy, owner_id=instance.owner_id, user=user):
            raise ExtensionNotAllowed(
                f"cannot extend {instance.name}: its template lets "
                f"{policy.get('extendable_by') or 'nobody'} extend it",
                extendable_by=policy.get("extendable_by") or "nobody",
            )
        if instance.status not in (Status.RUNNING, Status.PAUSED) or instance.stop_at is None:
            raise ExtensionRefused(
                f"cannot extend {instance.name}: it is {instance.status} with no time limit "
                "running",
                status=instance.status,
            )
        left = int(float(policy.get("extend_max") or 0)) - instance.extended_seconds
        if seconds > left:
            raise ExtensionRefused(
                f"cannot extend {instance.name} by {seconds}s: {max(left, 0)}s of extension "
                "left for this run",
                left=max(left, 0),
                asked=seconds,
            )
        instance.stop_at = instance.stop_at + dt.timedelta(seconds=seconds)
        instance.extended_seconds += seconds
        instance_save(instance, ("stop_at", "extended_seconds"))
        record(
            instance,
            kind="extend",
            actor=actor,
            message=f"time limit extended by {seconds}s: stops at {instance.stop_at.isoformat()}",
            data={"seconds": seconds, "stop_at": instance.stop_at.isoformat()},
        )
    return instance
