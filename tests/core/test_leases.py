"""Leases (``core.leases``): limits per holder and in all, exact under concurrency on
PostgreSQL; expiry without waiting (``expires_at`` set in the past); renew and release."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from core.errors import LeaseLimitReached
from core.leases import REAP_LEASES, lease_acquire, lease_release, lease_renew, leases_live
from core.models import Lease
from tests.processes import REPO, released_at_once, wait_for

pytestmark = pytest.mark.django_db


def _acquire(holder: str = "user:1", *, scope="stream", per_holder=None, total=None) -> Lease:
    return lease_acquire(scope=scope, holder=holder, ttl=60, per_holder=per_holder, total=total)


def _expire(*leases: Lease) -> None:
    """Make leases expired as the database's clock sees it, without waiting."""
    Lease.objects.filter(pk__in=[lease.pk for lease in leases]).update(
        expires_at=Now() - dt.timedelta(seconds=1)
    )


def _stream_pks() -> list[int]:
    """The leases of the scope these tests use: a throttle's lease (scope ``throttle:*``)
    that an earlier test's server committed after that test's flush is not theirs."""
    return list(Lease.objects.filter(scope="stream").values_list("pk", flat=True))


def _rows() -> list[tuple]:
    return list(Lease.objects.order_by("pk").values_list("pk", "scope", "holder", "expires_at"))


def test_a_holder_past_its_limit_is_refused_naming_the_limit_and_nothing_is_made():
    kept = [_acquire(per_holder=2, total=10) for _ in range(2)]
    before = _rows()
    with pytest.raises(LeaseLimitReached) as refused:
        _acquire(per_holder=2, total=10)
    assert (refused.value.limit, refused.value.number) == ("per_holder", 2)
    assert refused.value.details == {"scope": "stream", "limit": "per_holder", "number": 2}
    assert refused.value.http_status == 429
    assert _rows() == before, _rows()
    # Another holder has places of their own; the first keeps theirs.
    assert _acquire("user:2", per_holder=2, total=10).holder == "user:2"
    assert leases_live(scope="stream", holder="user:1") == len(kept) == 2


def test_the_total_counts_every_holder_of_the_scope_and_no_other_scope():
    _acquire("user:1", total=3)
    _acquire("user:2", total=3)
    _acquire("user:3", scope="other", total=1)
    _acquire("user:3", total=3)
    with pytest.raises(LeaseLimitReached) as refused:
        _acquire("user:4", per_holder=5, total=3)
    assert (refused.value.limit, refused.value.number) == ("total", 3)
    assert leases_live(scope="stream") == 3, _rows()
    assert leases_live(scope="other") == 1, _rows()


def test_without_limits_every_acquire_is_admitted():
    made = [_acquire() for _ in range(3)]
    assert len({lease.pk for lease in made}) == 3
    assert leases_live(scope="stream") == 3


def test_the_lease_returned_is_the_row_with_its_expiry_ttl_ahead():
    lease = lease_acquire(scope="stream", holder="user:7", ttl=30, per_holder=1, total=None)
    row = Lease.objects.get(pk=lease.pk)
    assert (row.scope, row.holder, row.key, row.count) == ("stream", "user:7", "", 1)
    assert row.expires_at == lease.expires_at
    ahead = Lease.objects.filter(pk=lease.pk, expires_at__gt=Now() + dt.timedelta(seconds=25))
    assert ahead.exists(), _rows()


def test_an_expired_lease_does_not_count_and_the_next_acquire_deletes_it():
    old = [_acquire(per_holder=2) for _ in range(2)]
    _expire(*old)
    assert leases_live(scope="stream") == 0
    assert leases_live(scope="stream", holder="user:1") == 0
    new = [_acquire(per_holder=2) for _ in range(2)]
    remaining = set(_stream_pks())
    assert remaining == {lease.pk for lease in new}, _rows()


def test_a_refused_acquire_still_deletes_expired_leases():
    expired = _acquire("user:9")
    _expire(expired)
    _acquire("user:1", per_holder=1)
    with pytest.raises(LeaseLimitReached):
        _acquire("user:1", per_holder=1)
    assert not Lease.objects.filter(pk=expired.pk).exists(), _rows()


def test_an_acquire_deletes_at_most_its_bound_of_expired_leases():
    Lease.objects.bulk_create(
        Lease(scope="stream", holder=f"user:{i}", expires_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
        for i in range(REAP_LEASES + 5)
    )
    _acquire()
    assert Lease.objects.filter(expires_at__year=2020).count() == 5, _rows()


def test_renew_keeps_a_live_lease_and_refuses_an_expired_or_released_one():
    lease = lease_acquire(scope="stream", holder="user:1", ttl=5, per_holder=None, total=None)
    assert lease_renew(lease_id=lease.pk, ttl=600) is True
    later = Lease.objects.get(pk=lease.pk).expires_at
    assert later > lease.expires_at + dt.timedelta(seconds=500), (later, lease.expires_at)

    _expire(lease)
    assert lease_renew(lease_id=lease.pk, ttl=600) is False  # never revived
    assert leases_live(scope="stream") == 0

    other = _acquire()
    lease_release(lease_id=other.pk)
    assert lease_renew(lease_id=other.pk, ttl=600) is False


def test_release_frees_the_place_at_once_and_twice_is_harmless():
    lease = _acquire(per_holder=1)
    lease_release(lease_id=lease.pk)
    lease_release(lease_id=lease.pk)
    assert leases_live(scope="stream") == 0
    assert _acquire(per_holder=1).pk != lease.pk


@pytest.mark.parametrize("ttl", [0, -1])
def test_a_ttl_that_is_not_positive_is_a_programming_error(ttl):
    with pytest.raises(ValueError, match="ttl"):
        lease_acquire(scope="stream", holder="u", ttl=ttl, per_holder=None, total=None)
    assert not Lease.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("limits", [{"total": 5}, {"per_holder": 5}], ids=["total", "per_holder"])
def test_twenty_threads_racing_for_five_places_get_exactly_five(postgres, limits):
    """Each thread on its own connection, all released at once."""

    def race(n: int) -> str:
        try:
            lease_acquire(
                scope="stream",
                holder="user:1" if "per_holder" in limits else f"user:{n}",
                ttl=60,
                per_holder=limits.get("per_holder"),
                total=limits.get("total"),
            )
            return "acquired"
        except LeaseLimitReached as refused:
            return refused.limit
        except Exception as exc:  # noqa: BLE001 - any other error fails the test
            return repr(exc)
        finally:
            connection.close()  # back to the pool

    outcomes = released_at_once(race, 20)
    (limit,) = limits
    assert sorted(outcomes) == ["acquired"] * 5 + [limit] * 15, outcomes
    assert leases_live(scope="stream") == 5, _rows()


@pytest.mark.django_db(transaction=True)
def test_an_expired_lease_another_transaction_holds_counts_until_it_ends(postgres):
    """A renewal (or release) under way when its lease expires may still commit: the
    acquire counts that lease rather than over-admit, and deletes it once it is free."""
    held = _acquire("user:1")
    _expire(held)
    locked, done = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                Lease.objects.select_for_update().get(pk=held.pk)
                locked.set()
                done.wait(60)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        wait_for(locked.is_set, timeout=10, message="the other transaction locks the lease")
        with pytest.raises(LeaseLimitReached) as refused:
            _acquire("user:2", total=1)
        assert refused.value.limit == "total"
    finally:
        done.set()
        holder.join(60)
    admitted = _acquire("user:2", total=1)
    assert set(_stream_pks()) == {admitted.pk}, _rows()


def test_the_live_count_reads_an_index_not_the_table(postgres):
    """What ``/metrics`` runs on every scrape: at 5,000 rows of other scopes and expired
    streams, the plan reads an index."""
    past = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    future = dt.datetime(2999, 1, 1, tzinfo=dt.UTC)
    Lease.objects.bulk_create(
        Lease(scope="stream" if i % 2 else "other", holder=f"user:{i}", expires_at=past)
        for i in range(5000)
    )
    Lease.objects.bulk_create(
        Lease(scope="stream", holder="user:1", expires_at=future) for _ in range(3)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Lease._meta.db_table}")
    with CaptureQueriesContext(connection) as queries:
        assert leases_live(scope="stream") == 3
    (statement,) = [q["sql"] for q in queries.captured_queries]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {statement}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index" in plan and "Seq Scan" not in plan, plan


# The quick start's path (SQLite, the ORM under its write lock), in a process of its own.
ON_SQLITE = """
import datetime as dt, json
from django.core.management import call_command
from django.utils import timezone
from core.errors import LeaseLimitReached
from core.leases import lease_acquire, lease_release, lease_renew, leases_live, rate_hit
from core.models import Lease

call_command("migrate", "core", verbosity=0)  # the lease table is all it needs
said = {}

def take(holder):
    try:
        return lease_acquire(scope="stream", holder=holder, ttl=60, per_holder=2, total=3).pk
    except LeaseLimitReached as refused:
        return refused.limit

first, second = take("u1"), take("u1")
said["taken"] = [take("u1"), take("u2"), take("u3")]
Lease.objects.filter(pk=first).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
said["live"] = leases_live(scope="stream")
said["after_expiry"] = isinstance(take("u3"), int)
said["expired_kept"] = Lease.objects.filter(pk=first).exists()
said["renewed"] = lease_renew(lease_id=second, ttl=60)
lease_release(lease_id=second)
said["renewed_after_release"] = lease_renew(lease_id=second, ttl=60)
said["hits"] = [rate_hit(scope="throttle:x", holder="u1", limit=2, period=60) for _ in range(3)]
print(json.dumps(said))
"""


@pytest.mark.slow  # a real manage.py process
def test_the_quick_start_on_sqlite_counts_the_same_with_no_service(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "GOBRAVE_SQLITE_PATH": str(tmp_path / "quick.sqlite3"),
        "GOBRAVE_CONTAINER_WORKSPACE_ROOT": str(tmp_path / "ws"),
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", ON_SQLITE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["taken"] == ["per_holder", said["taken"][1], "total"], said
    assert isinstance(said["taken"][1], int), said
    assert said["live"] == 2, said
    assert (said["after_expiry"], said["expired_kept"]) == (True, False), said
    assert (said["renewed"], said["renewed_after_release"]) == (True, False), said
    (admitted, _), (again, _), (refused, wait) = said["hits"]
    assert (admitted, again, refused) == (True, True, False), said
    assert 29 < wait <= 30, said
