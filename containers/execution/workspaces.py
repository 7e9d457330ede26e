"""Owners' workspaces on engines, and the worker's mount checks (SPEC section 8).

``workspace_ensure`` runs in the worker before each create whose spec mounts the owner's
workspace; ``mounts_check`` before each create and start on a local engine. Neither
holds a transaction while it calls the engine. ``workspace_retention_note`` runs when an
instance is deleted (the workspace_retention policy).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Case, F, PositiveIntegerField, Value, When
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from containers.engines import engine_for
from containers.engines.base import Engine
from containers.engines.base import Workspace as WorkspaceSpec
from containers.engines.calls import bounded_call
from containers.engines.labels import LABEL_INSTALLATION
from containers.errors import MountRefused
from containers.installation import installation_id
from containers.models import ContainerInstance, Runtime, Workspace
from containers.spec import mounts
from core import prepared

log = logging.getLogger(__name__)
LABEL_OWNER = "io.gobrave.owner"


def workspace_ensure(*, instance: ContainerInstance, engine: Engine) -> bool:
    """Make the instance's workspace exist on its engine, owned by the owner's uid:gid,
    mode 2770; returns True when the engine was asked (False: already made).

    1. A ``Workspace`` row for (runtime, owner, source) means it was made: nothing to do,
       except that a directory workspace that has gone missing is made again.
    2. Otherwise ask the engine (idempotent), then insert the row; a concurrent create of
       the same owner may insert it first, which is fine.
    Runs outside any transaction (the engine call may take a second).
    """
    wanted = instance.spec.get("workspace")
    if not wanted:
        return False
    made = prepared.exists(  # every create asks: a prepared statement on PostgreSQL
        "workspaces.made",
        lambda runtime, owner, source: Workspace.objects.filter(
            runtime_id=runtime, owner_id=owner, source=source
        ),
        runtime=instance.runtime_id,
        owner=instance.owner_id,
        source=wanted["source"],
    )
    if made and not (
        wanted["kind"] == "directory" and mounts.check_workspace_directory(wanted["source"])
    ):
        return False
    _make_owned(
        instance, engine, kind=wanted["kind"], source=wanted["source"],
        uid=int(wanted["uid"]), gid=int(wanted["gid"]),
    )  # fmt: skip
    log.info(
        "workspace %s (%s) ready on %s for owner %s",
        wanted["source"],
        wanted["kind"],
        instance.runtime.name,
        instance.owner_id,
    )
    return True


def workspace_retention_note(*, instance: ContainerInstance) -> None:
    """Record the deleted instance's ``workspace_retention`` on the workspace it mounted
    (the owner's row for its engine and source), for the policy pass.

    The instance's value is its template's own, as resolved into its ``spec["policy"]``
    at its create, or, where the template had none (or the instance predates the
    field), config.yml's, read when the pass runs. A template's value goes into
    ``retention`` (the longest so far; 0, kept for good, outlasts any); config.yml's
    sets ``retention_default``; the first record also ends "nothing recorded yet"
    (``retention_default`` null). Must run in the transaction that deletes the
    instance, under its row lock; one UPDATE through the workspaces' unique index, none
    for an instance that mounted no workspace. Idempotent.
    """
    wanted = (instance.spec or {}).get("workspace")
    if not wanted or instance.runtime_id is None:
        return
    own = (instance.spec.get("policy") or {}).get("workspace_retention")
    row = Workspace.objects.filter(
        runtime_id=instance.runtime_id, owner_id=instance.owner_id, source=wanted["source"]
    )
    if own is None:
        row.update(retention_default=True)
        return
    seconds = Value(int(own), output_field=PositiveIntegerField())
    longest = Case(
        When(retention=0, then=Value(0)),
        default=Greatest(Coalesce(F("retention"), seconds), seconds),
        output_field=PositiveIntegerField(),
    )
    row.update(
        retention=longest if own else Value(0),
        retention_default=Coalesce(F("retention_default"), Value(False)),
    )


def shared_volumes_ensure(*, instance: ContainerInstance, engine: Engine) -> int:
    """Volumes gobrave adds to a spec besides the workspace (a DAG run's shared ``/dag``)
    are made writable by the owner's group, like a workspace (uid:gid, mode 2770), since
    containers do not run as root. Returns how many the engine was asked to make.

    1. A ``Workspace`` row for (runtime, owner, volume) with this uid:gid means it was
       made so: nothing to do (a DAG run's nodes after its first pay no engine call).
    2. Otherwise ask the engine (idempotent), then record the row (uid:gid updated if a
       node of another user made it before). ``volume_remove`` deletes the row first.
    Runs outside any transaction (engine calls).
    """
    spec = instance.spec
    gid = int((spec.get("group_add") or [0])[0])
    uid = int(str(spec.get("user") or gid).split(":")[0])
    asked = 0
    for mount in spec.get("mounts", []):
        if mount.get("type") != "volume" or mount.get("workspace"):
            continue
        made = Workspace.objects.filter(
            runtime_id=instance.runtime_id,
            owner_id=instance.owner_id,
            source=mount["source"],
            uid=uid,
            gid=gid,
        ).exists()
        if made:
            continue
        _make_owned(instance, engine, kind="volume", source=mount["source"], uid=uid, gid=gid)
        asked += 1
    return asked


def _make_owned(
    instance: ContainerInstance, engine: Engine, *, kind: str, source: str, uid: int, gid: int
) -> None:
    """Ask the engine (idempotent) for ``source`` owned by uid:gid, mode 2770, then record
    it as a ``Workspace`` row (uid:gid updated if it was made for another before). The
    engine lends the ownership helper the instance's own image, so that is made present
    first. Runs outside any transaction (engine calls)."""
    spec = instance.spec
    engine.ensure_image(spec["image"], spec.get("pull_policy", "never"))
    engine.ensure_workspace(
        WorkspaceSpec(
            kind=kind,
            source=source,
            uid=uid,
            gid=gid,
            labels={LABEL_INSTALLATION: installation_id(), LABEL_OWNER: str(instance.owner_id)},
        ),
        image=spec["image"],
    )
    try:
        with transaction.atomic():
            Workspace.objects.update_or_create(
                runtime_id=instance.runtime_id,
                owner_id=instance.owner_id,
                source=source,
                defaults={"kind": kind, "uid": uid, "gid": gid},
            )
    except IntegrityError:
        pass  # recorded by a concurrent create of the same owner


def mounts_check(*, instance: ContainerInstance) -> None:
    """Check every bind mount of the spec again, on this host, right before the engine
    mounts it; raises ``MountRefused`` (user text names the volume only; the operator
    text names the path and why).

    Remote engines get no bind mounts at all; on a local engine each operator-declared
    source passes ``mounts.check_bind_source`` against today's ``allowed_volume_roots``,
    and a directory workspace must be a real directory (no symlink on its path).
    """
    config = settings.GOBRAVE["container"]
    template = instance.spec.get("labels", {}).get("io.gobrave.template", "")
    for index, mount in enumerate(instance.spec.get("mounts", [])):
        if mount.get("type", "bind") != "bind":
            continue
        if not instance.runtime.is_local:
            reason = "remote engines get volumes only"
        elif mount.get("workspace"):
            reason = mounts.check_workspace_directory(mount["source"])
        else:
            reason = mounts.check_bind_source(
                mount["source"],
                roots=config["allowed_volume_roots"],
                workspace_root=config["workspace_root"],
            )
        if reason:
            raise MountRefused(
                f"the volume mounted at {mount['target']} of template {template} was refused",
                operator_message=f"instance {instance.id}: bind source {mount['source']} "
                f"(target {mount['target']}, mount {index}) refused: {reason}",
                target=mount["target"],
            )


SIZES_BATCH = 500  # rows per UPDATE of ``workspace_sizes_refresh``


def workspace_sizes_refresh(*, workspaces: Iterable[Workspace]) -> list[str]:
    """Ask each engine what its workspace volumes hold and record it on the rows
    (``size_bytes``, ``size_checked_at``), so pages show sizes without asking.

    1. Group the rows by runtime; ask each engine once for its volumes' sizes, bounded in
       time (``bounded_call``; Docker measures all volumes at once).
    2. A volume the engine measured gets its size; one it did not (or a directory, which
       engines do not measure) gets ``None``; both are stamped as checked now.
    3. An engine that fails or does not answer leaves its rows as they were.
    Must run outside a transaction (engine calls); idempotent. Returns one line per
    engine that did not answer.
    """
    by_runtime: dict[int, list[Workspace]] = {}
    for row in workspaces:
        by_runtime.setdefault(row.runtime_id, []).append(row)
    runtimes = Runtime.objects.in_bulk(list(by_runtime))
    problems = []
    for runtime_id, rows in by_runtime.items():
        runtime = runtimes[runtime_id]
        engine = engine_for(runtime)
        names = [row.source for row in rows if row.kind == Runtime.WorkspaceDriver.VOLUME]
        sizes, reason = bounded_call(lambda e=engine, n=names: e.volume_sizes(n) if n else {})
        if reason:
            problems.append(f"{runtime.name}: {reason}")
            continue
        now = timezone.now()
        for row in rows:
            row.size_bytes, row.size_checked_at = sizes.get(row.source), now
        # One statement per SIZES_BATCH rows (an operator may select thousands), not one each.
        Workspace.objects.bulk_update(
            rows, ["size_bytes", "size_checked_at"], batch_size=SIZES_BATCH
        )
    return problems
