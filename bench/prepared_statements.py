"""Prepared statements: gobrave's own layer (``core/prepared.py``) against psycopg's and
Django's, on the create path and the relay's claim, in one run.

Everything runs in this process on the fake runtime (no engine is asked), on one Django
connection that is closed and opened again with each mode's ``OPTIONS``:

- ``A``: as shipped. The hot path's statements go through ``core/prepared.py`` (compiled
  once, prepared on first use); everything else is Django's ORM, bound on the client
  (``prepare_threshold`` 5 only matters to the layer's server-binding cursor).
- ``B``: the layer off (``prepared.layer.enabled = False``: every read and write takes its ORM
  form, literal SQL goes through Django's cursor), Django's ``server_side_binding`` on
  and psycopg's automatic preparation (``prepare_threshold`` 5: a statement run five
  times is prepared).
- ``B0``: as ``B`` with ``prepare_threshold`` 0 (every statement prepared at once).
- ``C``: the layer off, Django's defaults (bound on the client, nothing prepared).
- ``D`` (claim only): the claim's ORM steps (the path SQLite takes) on PostgreSQL, with
  ``C``'s connection, to show what the claim's hand-written SQL saves. Not a correct
  claim on PostgreSQL (no claimers' lock, no SKIP LOCKED): timed, never shipped.

Each round runs every mode once, in an order that rotates from round to round, so that
the machine's noise falls on all alike. In a mode's turn, after a few untimed warm-up
calls on its fresh connection (so psycopg has prepared what it will prepare):

1. the create path: ``container_create_by_template`` N times (time per create); the
   rows it wrote are deleted afterwards, untimed;
2. the claim: ``outbox.relay.claim("create", n)`` M times over a backlog of pending
   create requests (uuid aggregates, so the claim guard asks which hold a slot); the
   rows claimed go back to ``pending`` after each (untimed), so every claim sees the
   same table. (Never a rollback: psycopg forgets a connection's prepared statements
   on every rollback.)

    .venv/bin/python bench/prepared_statements.py [--rounds 7] [--creates 40] [--claims 60]
        [--backlog 5000] [--keys 50] [--batch 8]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

import _common as c

MODES = {
    "A": {"layer": True, "options": {"prepare_threshold": 5}},
    "B": {"layer": False, "options": {"server_side_binding": True, "prepare_threshold": 5}},
    "B0": {"layer": False, "options": {"server_side_binding": True, "prepare_threshold": 0}},
    "C": {"layer": False, "options": {}},
    "D": {"layer": False, "options": {}, "claim_orm": True, "claim_only": True},
}
WARM_UP = 8  # calls before timing: more than psycopg's prepare_threshold of 5
BACKLOG = """
INSERT INTO outbox_outboxevent
    (kind, queue, aggregate_id, fairness_key, payload, status, attempts, reclaims,
     available_at, last_error, outcome, created_at)
SELECT 'ContainerCreateRequest', 'create', gen_random_uuid()::text, 'owner-' || (g %% %s),
       '{"by": "bench"}'::jsonb, 'pending', 0, 0, now() - interval '1 minute', '', '', now()
FROM generate_series(1, %s) AS g
"""


def use(mode: str, base: dict) -> None:
    """Open a fresh connection with ``mode``'s options and switch the layer."""
    from django.db import connection

    from core import prepared

    connection.close()
    options = {k: v for k, v in base.items() if k not in ("prepare_threshold",)}
    options.update(MODES[mode]["options"])
    connection.settings_dict["OPTIONS"] = options
    prepared.layer.enabled = MODES[mode]["layer"]
    connection.ensure_connection()


def fixtures(fake_dir: str):
    owner, template = c.fake_fixtures(fake_dir, env={"GROUP": "$GROUPID"})
    return template, owner


def creates(count: int, template, owner) -> list[float]:
    """Seconds per create; the rows written are deleted afterwards (untimed)."""
    from containers.models import ContainerEvent, ContainerInstance
    from containers.requests.services import container_create_by_template
    from outbox.models import OutboxEvent

    last = OutboxEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    out, made = [], []
    for _ in range(count):
        t0 = time.perf_counter()
        instance = container_create_by_template(template=template, owner=owner, actor="bench")
        out.append(time.perf_counter() - t0)
        made.append(instance.pk)
    ContainerEvent.objects.filter(instance_id__in=made).delete()
    ContainerInstance.objects.filter(pk__in=made).delete()
    OutboxEvent.objects.filter(id__gt=last).delete()
    return out


def claims(count: int, batch: int, *, orm: bool) -> list[float]:
    """Seconds per claim of up to ``batch`` rows (its own transaction, committed); the rows
    go back to ``pending`` afterwards, untimed. Not rolled back: psycopg forgets every
    prepared statement of a connection on a rollback."""
    from unittest import mock

    from outbox import conf, relay
    from outbox.models import OutboxEvent

    out = []
    patch = mock.patch.object(conf, "is_postgres", lambda _connection: False)
    for _ in range(count):
        if orm:
            patch.start()
        try:
            t0 = time.perf_counter()
            claimed = relay.claim("create", batch)
            out.append(time.perf_counter() - t0)
        finally:
            if orm:
                patch.stop()
        assert len(claimed) == batch, claimed
        OutboxEvent.objects.filter(id__in=[row_id for row_id, _ in claimed]).update(
            status="pending", claim_token=None, lease_expires_at=None
        )
    return out


def ms(values: list[float], p: float) -> float:
    return c.percentile(values, p) * 1000 if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds (every mode once each)")
    parser.add_argument("--creates", type=int, default=40, help="timed creates a mode a round")
    parser.add_argument("--claims", type=int, default=60, help="timed claims a mode a round")
    parser.add_argument("--backlog", type=int, default=5000, help="pending rows to claim from")
    parser.add_argument("--keys", type=int, default=50, help="their fairness keys")
    parser.add_argument("--batch", type=int, default=8, help="rows a claim takes")
    parser.add_argument("--modes", default=",".join(MODES), help="modes to run, in order")
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args()
    modes = args.modes.split(",")

    c.header("prepared statements: core/prepared.py against psycopg's and Django's own")
    fake_dir = f"/tmp/gobrave-bench-prepared-{uuid.uuid4().hex[:8]}"
    with c.bench_database("prepared", keep=args.keep_db) as url:
        env = c.app_env(
            url,
            container_create_queue_max_pending=10 * args.creates + 100,
            container_create_queue_max_concurrency=args.batch,
            **c.NO_OWNER_QUOTAS,  # one user makes every create
        )
        c.django_setup(env)
        from django.db import connection

        base = dict(connection.settings_dict["OPTIONS"])
        template, owner = fixtures(fake_dir)
        with connection.cursor() as cursor:
            cursor.execute(BACKLOG, [args.keys, args.backlog])
            cursor.execute("VACUUM ANALYZE")
        print(
            f"   {args.rounds} rounds x modes {', '.join(modes)}: {args.creates} creates and "
            f"{args.claims} claims of {args.batch} (of {args.backlog:,} pending rows over "
            f"{args.keys} keys) a mode a round, after {WARM_UP} untimed of each"
        )
        create_times: dict[str, list[float]] = {m: [] for m in modes}
        claim_times: dict[str, list[float]] = {m: [] for m in modes}
        round_medians: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
        kept: dict[str, int] = {}  # statements prepared on the mode's connection (last round)
        t_start = time.perf_counter()
        for n in range(args.rounds):
            order = modes[n % len(modes) :] + modes[: n % len(modes)]
            for mode in order:
                use(mode, base)
                spec = MODES[mode]
                made: list[float] = []
                if not spec.get("claim_only"):
                    creates(WARM_UP, template, owner)
                    made = creates(args.creates, template, owner)
                    create_times[mode] += made
                claims(WARM_UP, args.batch, orm=spec.get("claim_orm", False))
                took = claims(args.claims, args.batch, orm=spec.get("claim_orm", False))
                claim_times[mode] += took
                round_medians[mode].append((ms(made, 50), ms(took, 50)))
                with connection.cursor() as cursor:
                    cursor.execute("SELECT count(*) FROM pg_prepared_statements")
                    kept[mode] = cursor.fetchone()[0]
            print(f"   round {n + 1}/{args.rounds} done, {c.load()}", flush=True)
        use("A", base)
        elapsed = time.perf_counter() - t_start

        print(f"\n   {elapsed:.0f} s; per mode, over every round (ms; ratio = A's p50 / mode's):")
        print(
            f"   {'mode':4} {'create p50':>10} {'p95':>7} {'A/mode':>7}   "
            f"{'claim p50':>9} {'p95':>7} {'A/mode':>7}   round medians create | claim   prepared"
        )
        a_create, a_claim = ms(create_times.get("A", []), 50), ms(claim_times.get("A", []), 50)
        for mode in modes:
            made, took = create_times[mode], claim_times[mode]
            spread = round_medians[mode]
            creates_seen = [x for x, _ in spread if x == x]
            claims_seen = [y for _, y in spread]
            print(
                f"   {mode:4} {ms(made, 50):10.2f} {ms(made, 95):7.2f} "
                f"{a_create / ms(made, 50) if made else float('nan'):7.2f}   "
                f"{ms(took, 50):9.2f} {ms(took, 95):7.2f} {a_claim / ms(took, 50):7.2f}   "
                f"{min(creates_seen, default=float('nan')):.2f}-"
                f"{max(creates_seen, default=float('nan')):.2f} | "
                f"{min(claims_seen):.2f}-{max(claims_seen):.2f}   {kept[mode]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
