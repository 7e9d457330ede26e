"""Requests: create, start, stop, delete. The one way in, for the API, admin and CLI.

Each request is one transaction: lock, check, transition, write one ``OutboxEvent`` and
one ``ContainerEvent``, commit. A refused request raises a ``DomainError`` and leaves
nothing behind. Repeats of a request already under way are accepted as no-ops.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction

from containers import access
from containers.counters import RequestStat
from containers.errors import (
    InstanceQuotaExceeded,
    InvalidSpec,
    InvalidTransition,
    MountRefused,
    NameTaken,
    NotFound,
    OwnerQuotaExceeded,
    QueueFull,
    TemplateUnavailable,
)
from containers.installation import installation_id
from containers.models import ContainerInstance, ContainerTemplate, Runtime
from containers.placement.choice import constraints_of, runtimes_matching
from containers.queues import RequestKind
from containers.requests.lifecycle import instance_lock, lock_gate, move, move_many, record
from containers.spec.engine_parts import RUNTIME_NAME_STANDIN, WORKSPACE_PATH_STANDIN
from containers.spec.hardening import owner_ids
from containers.spec.policies import policy_resolve
from containers.spec.resolve import resolve_spec
from containers.states import BEING_DELETED, Status, sources_of
from core import prepared
from core.counters import counter_add
from core.errors import DomainError
from outbox.services import Enqueued, outbox_enqueue, outbox_enqueue_many
from tenants.selectors import OwnerQuotas, owner_quotas

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class RequestResult:
    """What a start, stop or delete request returns.

    ``queued`` is True when this call wrote a new request (outbox row and history
    entry), False for a repeat of a request already under way (a no-op, nothing written).
    """

    instance: ContainerInstance
    queued: bool


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]


def _first_group_id(owner) -> int | None:
    """The id of the owner's first group (``$GROUPID``), or None (every create asks: one
    table, compiled once, a prepared statement on PostgreSQL)."""
    membership = owner.groups.through
    found = prepared.rows(
        "services.first_group",
        lambda user: (
            membership.objects.filter(user_id=user).order_by("group_id").values_list("group_id")[:1]
        ),
        user=owner.pk,
    )
    return found[0][0] if found else None


def _variables(
    *,
    instance_id: uuid.UUID,
    name: str,
    owner: AbstractBaseUser,
    template: ContainerTemplate,
) -> dict[str, str]:
    """gobrave's variables for a create; the engine's (``$RUNTIME_NAME``,
    ``$WORKSPACE_PATH``) are stand-ins until the create is placed
    (``containers.spec.engine_parts``)."""
    group = _first_group_id(owner) if hasattr(owner, "groups") else None
    return {
        "USERID": str(owner.pk),
        "GROUPID": str(group or owner.pk),
        "OWNER_ID": str(owner.pk),
        "USERNAME": owner.get_username(),
        "INSTANCE_ID": str(instance_id),
        "INSTANCE_NAME": name,
        "CONTAINER_NAME": f"gb-{instance_id}",
        "TEMPLATE_ID": str(template.pk),
        "TEMPLATE_NAME": template.name,
        "RUNTIME_NAME": RUNTIME_NAME_STANDIN,
        "WORKSPACE_PATH": WORKSPACE_PATH_STANDIN,
        "WORKSPACE_ROOT": _config()["workspace_root"],
    }


def _retry_after(pending: int) -> int:
    """A whole number of seconds (at least 1) after which a slot is likely free."""
    return max(1, math.ceil(pending / _config()["create_queue_max_concurrency"]))


def _check_owner_quotas(*, owner, quotas: OwnerQuotas) -> None:
    """Refuse the owner's new instance if it is over a quota: ``OwnerQuotaExceeded``
    (pending, 429) or ``InstanceQuotaExceeded`` (instances, 409).

    Runs under the admission gate, with the new instance already inserted (so each
    count includes it): every earlier holder of the gate has committed, so the counts
    are exact however many creates run at once.
    """
    if quotas.max_pending_per_owner is None and quotas.max_instances_per_owner is None:
        return  # no query built for the usual case
    mine = ContainerInstance.objects.filter(owner=owner)
    limit = quotas.max_pending_per_owner
    if limit is not None:
        pending = mine.filter(status=Status.PENDING).count() - 1
        if pending >= limit:
            raise OwnerQuotaExceeded(
                f"max_pending_per_owner: {owner.get_username()} already has {pending} create "
                f"requests waiting (limit {limit}); retry later",
                retry_after=_retry_after(pending),
                quota="max_pending_per_owner",
                limit=limit,
                current=pending,
            )
    limit = quotas.max_instances_per_owner
    if limit is not None:
        alive = mine.exclude(status__in=list(BEING_DELETED)).count() - 1
        if alive >= limit:
            raise InstanceQuotaExceeded(
                f"max_instances_per_owner: {owner.get_username()} already has {alive} "
                f"instances (limit {limit}); delete one first",
                quota="max_instances_per_owner",
                limit=limit,
                current=alive,
            )


def _admission_pending() -> int:
    """Take the admission gate for the rest of the transaction, then count the ``pending``
    instances. On PostgreSQL one round trip while the gate is held
    (``gobrave_admission_pending()``, migration 0011: each of its statements sees a new
    snapshot, so the count sees every earlier holder's rows); a gate row gone missing (a
    flushed database) is made again first."""
    if connection.vendor == "postgresql":
        (count,) = prepared.execute("SELECT gobrave_admission_pending()").fetchone()
        if count >= 0:
            return count
    lock_gate("admission")  # SQLite, or the gate row went missing: the ORM's two steps
    return ContainerInstance.objects.filter(status=Status.PENDING).count()


def _from_snapshot(snapshot: Mapping[str, Any]) -> SimpleNamespace:
    """A template as a snapshot recorded it; fields it predates take their defaults."""
    fields = {
        field.attname: field.get_default() for field in ContainerTemplate._meta.concrete_fields
    }
    fields.update(snapshot)
    return SimpleNamespace(pk=fields["id"], **fields)


def container_create_by_template(
    *,
    template: ContainerTemplate,
    owner: AbstractBaseUser,
    actor: str,
    name: str | None = None,
    env: dict[str, Any] | None = None,
    instance_id: uuid.UUID | None = None,
    runtime: Runtime | None = None,
    snapshot: Mapping[str, Any] | None = None,
    extra_labels: Mapping[str, str] | None = None,
    extra_mounts: list[dict[str, Any]] | None = None,
    exempt_from_policies: bool = False,
) -> ContainerInstance:
    """Accept a create request, or refuse it (``OwnerQuotaExceeded``,
    ``InstanceQuotaExceeded``, ``QueueFull``, ``InvalidSpec``, ``NameTaken``: the owner
    has an instance of that name, the database's ``instance_name_per_owner`` says so;
    ``NoMatchingRuntime`` when no enabled engine's labels could ever match).

    0. The template must be enabled and open to ``owner`` (``TemplateUnavailable``).
    1. Check that some enabled engine matches the constraints and resolve the spec, with
       stand-ins for its engine's parts (no lock held; a bad spec stops here). The
       instance is not placed: its engine is chosen when it leaves ``pending``
       (``containers.requests.placing``), from the constraints stored in
       ``spec["placement"]``; cordoned, unreachable or full engines make it wait there.
    2. In one transaction: insert the instance, its history entry and its
       ``ContainerCreateRequest`` outbox row; then take the global admission gate (every
       create, whatever its template, runtime or owner), check the owner's quotas
       (``tenants.selectors.owner_quotas``: pending, and instances not being deleted),
       and count the other ``pending`` instances; at ``create_queue_max_pending`` refuse.
       Any refusal rolls all of it back.
    A refusal is counted for the dashboard and leaves no row anywhere.

    For callers that create on behalf of a larger unit of work (DAG runs):
    ``instance_id`` makes the create idempotent (an instance with that id, made
    earlier, is returned as it is, not queued again); ``runtime`` pins the engine (it
    must still match the constraints; a cordon does not stop it: the run was placed
    before; the instance waits while it is full or away); ``snapshot``
    (``spec.template_snapshot``) is resolved instead of the template's current fields;
    ``extra_labels`` and ``extra_mounts`` (trusted, made by gobrave: e.g.
    ``{"type": "volume", "source": name, "target": "/dag"}``) are added to the resolved
    spec; ``exempt_from_policies`` leaves the lifecycle policies out of the spec (a DAG
    node: its run has cleanup policies of its own, and a policy stop would fail the
    node). Otherwise the template's policies (``containers.spec.policies``) are resolved
    into ``spec["policy"]``, fixed like the rest of the spec.
    """
    if not access.may_use_template(owner, template):
        raise TemplateUnavailable(
            f"template: {template.name} is switched off or not open to {owner.get_username()}",
            field="template",
        )
    if instance_id is not None:
        existing = ContainerInstance.objects.filter(id=instance_id).first()
        if existing is not None:
            return existing
    source = template if snapshot is None else _from_snapshot(snapshot)
    # The run was placed when it started: its later nodes follow it, cordoned or not.
    matching = runtimes_matching(template=source, among=None if runtime is None else [runtime])
    if runtime is not None:
        runtime = matching[0]
    instance_id = instance_id or uuid.uuid4()
    if not name:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", template.name).strip("-._")[:100] or "c"
        name = f"{stem}-{str(instance_id)[:8]}"
    name = name.strip()
    if not _NAME.fullmatch(name):
        raise InvalidSpec(
            "name: 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit",
            field="name",
        )
    security = _config()["security"]
    installation = installation_id()
    uid, gid = owner_ids(owner.pk, security)
    # A stand-in until placement: its kind and source are the chosen engine's.
    workspace = {"kind": "volume", "source": WORKSPACE_PATH_STANDIN, "uid": uid, "gid": gid}
    variables = _variables(instance_id=instance_id, name=name, owner=owner, template=source)
    # An operator's bind mount needs an engine on this host: allowed if one matches, and
    # then the create is placed only on such an engine (``local_only`` below).
    local = any(each.is_local for each in matching)
    try:
        spec = resolve_spec(
            template=source,
            variables=variables,
            env_overrides=env,
            roots=_config()["allowed_volume_roots"],
            installation=installation,
            owner_id=owner.pk,
            security=security,
            workspace=workspace,
            local=local,
            workspace_root=_config()["workspace_root"],
        )
        spec["placement"] = {
            "constraints": constraints_of([source]),
            "local_only": any(
                m["type"] == "bind" and not m.get("workspace") for m in spec["mounts"]
            ),
            "engine": "",  # not placed yet (``containers.spec.engine_parts``)
        }
    except MountRefused as exc:
        log.warning("create refused for %s: %s", owner.get_username(), exc.operator_message)
        raise
    if not exempt_from_policies:
        spec["policy"] = policy_resolve(source)
    if extra_labels:
        spec["labels"] = {**dict(extra_labels), **spec["labels"]}
    for mount in extra_mounts or []:
        spec["mounts"].append(
            {
                "source": mount["source"],
                "target": mount["target"],
                "read_only": bool(mount.get("read_only", False)),
                "type": mount.get("type", "bind"),
            }
        )
    limit = _config()["create_queue_max_pending"]
    quotas = owner_quotas(owner=owner)
    try:
        with transaction.atomic():
            instance = ContainerInstance(
                id=instance_id,
                name=name,
                owner=owner,
                template=template,
                runtime=runtime,
                spec=spec,
            )
            prepared.insert(instance)
            record(
                instance,
                kind=RequestKind.CREATE,
                actor=actor,
                to_status=Status.PENDING,
                message=f"create requested from template {template.name}"
                + (f", pinned to {runtime.name}" if runtime is not None else ""),
            )
            outbox_enqueue(
                kind=RequestKind.CREATE,
                aggregate_id=str(instance.id),
                payload={"by": actor},
                fairness_key=str(owner.pk),  # owners are served round-robin (contract §8)
            )
            # Last, so the gate is held only for the count and the commit. Every earlier
            # holder has committed when we get it, so the count sees every admitted row.
            pending = _admission_pending()
            _check_owner_quotas(owner=owner, quotas=quotas)
            ahead = pending - 1
            if ahead >= limit:
                raise QueueFull(
                    f"the create queue is full ({ahead} pending, limit {limit}); retry later",
                    retry_after=_retry_after(ahead),
                    pending=ahead,
                    limit=limit,
                )
    except (QueueFull, OwnerQuotaExceeded, InstanceQuotaExceeded):
        # Buffered where the process buffers (a web worker): a storm of refusals must not
        # queue up on one counter row.
        counter_add(RequestStat.CREATE_REFUSED)
        raise
    except IntegrityError:
        # The same instance_id was admitted meanwhile: that request is the one. Else the
        # owner has an instance of this name (``instance_name_per_owner``; a create of the
        # same name at the same time waits on the index until the first one commits).
        existing = ContainerInstance.objects.filter(id=instance_id).first()
        if existing is None:
            if ContainerInstance.objects.filter(owner=owner, name=name).exists():
                raise NameTaken(
                    f"name: {owner.get_username()} already has an instance named {name}",
                    field="name",
                    name=name,
                ) from None
            raise
        return existing
    counter_add(RequestStat.CREATE_ACCEPTED)  # buffered in a web worker (gobrave.wsgi)
    return instance


# What each request moves an instance to, and where a repeat of it is a no-op.
_REQUESTS: dict[str, tuple[RequestKind, str, frozenset[str]]] = {
    "start": (
        RequestKind.START,
        Status.START_PENDING,
        frozenset({Status.START_PENDING, Status.STARTING}),
    ),
    "stop": (
        RequestKind.STOP,
        Status.STOP_PENDING,
        frozenset({Status.STOP_PENDING, Status.STOPPING, Status.STOPPED, Status.FAILED}),
    ),
    "delete": (
        RequestKind.DELETE,
        Status.DELETE_PENDING,
        frozenset({Status.DELETE_PENDING, Status.DELETING}),
    ),
}


def _request(
    action: str,
    *,
    instance_id: uuid.UUID | str,
    actor: str,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> RequestResult:
    """The shared shape of start, stop and delete (see the module docstring). ``reason``
    (why, e.g. a policy's rule) and ``data`` go into the history entry."""
    with transaction.atomic():
        try:
            instance = instance_lock(instance_id)
        except ValueError:  # no uuid: no such instance
            instance = None
        if instance is None:
            raise NotFound(f"no container instance {instance_id}", id=str(instance_id))
        return request_locked(action, instance, actor=actor, reason=reason, data=data)


def request_locked(
    action: str,
    instance: ContainerInstance,
    *,
    actor: str,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> RequestResult:
    """The request ``action`` (``start``, ``stop``, ``delete``) on an instance whose row
    the caller holds (``instance_lock``), inside the caller's transaction: the no-op
    check, the transition check, the move (its history entry) and the outbox row. Raises
    ``InvalidTransition`` before it writes anything."""
    [result] = requests_locked(action, [(instance, reason, data)], actor=actor)
    if isinstance(result, DomainError):
        raise result
    return result


def requests_locked(
    action: str,
    asked: list[tuple[ContainerInstance, str, dict[str, Any] | None]],
    *,
    actor: str,
) -> list[RequestResult | DomainError]:
    """``request_locked`` of many instances at once (``(instance, reason, data)`` each,
    every row held by the caller's transaction), for a caller that asks for many
    (``containers.requests.bulk``): the result of each, in order, a refusal returned (not
    raised: nothing is written for it, and the others go on).

    1. Each: a no-op (a repeat of a request under way) or a refusal
       (``InvalidTransition``) is decided, as for one request.
    2. The others move together (``move_many``: the state machine's transitions, one
       statement for the rows and one for their history entries) and get their outbox
       rows in one round trip (``outbox_enqueue_many``), in the same order.
    """
    kind, target, noop = _REQUESTS[action]
    results: list[RequestResult | DomainError] = []
    moving: list[tuple[ContainerInstance, str, dict[str, Any] | None]] = []
    for instance, reason, data in asked:
        if instance.status in noop:
            results.append(RequestResult(instance=instance, queued=False))
        elif instance.status not in sources_of(target):
            results.append(
                InvalidTransition(
                    f"cannot {action} {instance.name}: it is {instance.status}",
                    status=instance.status,
                    action=action,
                )
            )
        else:
            message = f"{action} requested" + (f": {reason}" if reason else "")
            moving.append((instance, message, data))
            results.append(RequestResult(instance=instance, queued=True))
    if len(moving) == 1:  # one request (every person's): move()'s prepared statements
        instance, message, data = moving[0]
        move(instance, target, actor=actor, kind=kind, message=message, data=data)
        outbox_enqueue(
            kind=kind,
            aggregate_id=str(instance.id),
            payload={"by": actor},
            fairness_key=str(instance.owner_id),
        )
    elif moving:
        move_many(moving, target, actor=actor, kind=kind)
        outbox_enqueue_many(
            kind=kind,
            rows=[
                Enqueued(str(instance.id), {"by": actor}, str(instance.owner_id))
                for instance, _, _ in moving
            ],
        )
    return results


def container_start(*, instance_id: uuid.UUID | str, actor: str) -> RequestResult:
    """running/paused/stopped → start_pending; a no-op while start_pending or starting."""
    return _request("start", instance_id=instance_id, actor=actor)


def container_stop(
    *,
    instance_id: uuid.UUID | str,
    actor: str,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> RequestResult:
    """running/paused → stop_pending, and start_pending → stop_pending (a waiting start
    cancelled: its request is superseded); a no-op while stop_pending, stopping, stopped
    or failed. ``reason`` and ``data`` (a policy's rule) are recorded in the history entry."""
    return _request("stop", instance_id=instance_id, actor=actor, reason=reason, data=data)


def container_delete(
    *,
    instance_id: uuid.UUID | str,
    actor: str,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> RequestResult:
    """Any state → delete_pending (a waiting or running start too: its request is
    superseded, or finishes first); a no-op while delete_pending or deleting.
    ``reason`` and ``data`` (a policy's rule) are recorded in the history entry."""
    return _request("delete", instance_id=instance_id, actor=actor, reason=reason, data=data)
