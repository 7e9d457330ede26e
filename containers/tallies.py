"""How many instances each runtime holds in each status, never a scan of the instances.

The one reader of the instance tally (``containers.instances``: migration 0023's
statement triggers keep it, ``core.tallies``). ``/metrics``, the fleet's page and
placement's usage (``containers.requests.slots.engine_usage``) all read it here.
"""

from __future__ import annotations

from django.db.models import Count

from containers.models import ContainerInstance
from core.tallies import tallies_kept, tally_read

INSTANCE_TALLY = "containers.instances"  # migration 0023's triggers keep it


def instance_counts() -> dict[tuple[int | None, str], int]:
    """``{(runtime_id, status): instances}`` over every instance, never a scan of them
    (``runtime_id`` None: creates waiting unplaced).

    On PostgreSQL the tally the table's triggers keep (``core.tallies``): its cost is the
    number of runtimes and statuses, not of instances, and it is exact in the reader's
    snapshot (a writer's deltas commit with its rows, its own statements' included).
    Elsewhere (SQLite) one grouped count.
    """
    if tallies_kept():
        counts = {}
        for key, (n, _total) in tally_read(INSTANCE_TALLY).items():
            runtime_id, _, status = key.partition(" ")
            counts[(int(runtime_id) if runtime_id else None, status)] = n
        return counts
    grouped = ContainerInstance.objects.order_by().values_list("runtime_id", "status")
    return {(r, s): n for r, s, n in grouped.annotate(n=Count("id"))}
