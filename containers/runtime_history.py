"""An engine's history (``RuntimeEvent``): the one writer of its entries.

Every service that changes how an engine stands (its health,
``containers.execution.health``; cordon, uncordon, decommission,
``containers.fleet.services``; added, settings, enabled, capacity and deleted,
``containers.fleet.runtimes``) calls ``runtime_event_record`` inside the transaction
that makes the change.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from containers.models import Runtime, RuntimeEvent

Kind = RuntimeEvent.Kind


def runtime_event_record(
    *,
    runtime: Runtime,
    kind: Kind,
    actor: str,
    message: str = "",
    from_status: str = "",
    to_status: str = "",
    data: dict[str, Any] | None = None,
) -> RuntimeEvent:
    """Append one entry to ``runtime``'s history (its id and its name now, kept as plain
    values: the entry outlives the row). Must run inside the transaction that makes the
    change it records (``RuntimeError`` otherwise), so the two commit together; one
    INSERT, no lock. Not idempotent: each call is one entry."""
    if not connection.in_atomic_block:
        raise RuntimeError("runtime_event_record() must run inside transaction.atomic()")
    return RuntimeEvent.objects.create(
        runtime_id=runtime.pk,
        runtime_name=runtime.name,
        kind=kind,
        actor=actor,
        message=message[:2000],
        from_status=from_status,
        to_status=to_status,
        data=data or {},
    )
