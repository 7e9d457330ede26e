"""The create queue's claim guard and the handlers' capacity gate racing on PostgreSQL.

Workers (threads, each on its own connection) claim and run creates that fail once and
come due again fast, so claims of retries (which take the gate in the claim) and fresh
creates' gates (which take it under an instance's row lock) run at the same time. No
lock cycle (PostgreSQL would abort one with a deadlock), and a sampler that counts slots
as contract §4 defines them (``containers.requests.slots``) never sees more than the cap.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from containers.engines import engine_for
from containers.models import ContainerInstance
from containers.requests.services import container_create_by_template
from containers.requests.slots import slot_count
from outbox import relay
from outbox.models import OutboxEvent
from tests.processes import outbox_rows, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

CAP, WORKERS, INSTANCES = 2, 4, 12


def test_claims_and_gates_together_never_pass_the_cap_nor_deadlock(
    postgres, fake_runtime, template, owner, gobrave_config
):
    gobrave_config(
        container={"create_queue_max_concurrency": CAP},
        outbox={
            "backoff_base": 0.05,
            "backoff_cap": 0.2,
            "max_attempts": 50,
            "poll_interval": 0.05,
        },
    )
    engine_root = engine_for(fake_runtime).root
    (engine_root / "fail-create").write_text(str(INSTANCES))  # about one failure each
    (engine_root / "delay-create").write_text("0.02")  # creates overlap
    for _ in range(INSTANCES):
        container_create_by_template(template=template, owner=owner, actor="t")
    stop = threading.Event()
    samples: list[int] = []
    errors: list[str] = []

    def work() -> None:
        try:
            while not stop.is_set():
                claimed = relay.claim("create", 2)
                for event_id, token in claimed:
                    relay.execute(event_id, token)
                if not claimed:
                    time.sleep(0.01)
        except Exception as exc:  # noqa: BLE001 - a deadlock or any error fails the test
            errors.append(repr(exc))
        finally:
            connection.close()

    def sample() -> None:
        try:
            while not stop.is_set():
                samples.append(slot_count())
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(WORKERS)]
    threads.append(threading.Thread(target=sample))
    for thread in threads:
        thread.start()
    try:
        wait_for(
            lambda: (
                errors or ContainerInstance.objects.filter(status="running").count() == INSTANCES
            ),
            timeout=120,
            message=f"{INSTANCES} running",
            describe=outbox_rows,
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    rows = OutboxEvent.objects.all()
    assert all(row.status == "sent" for row in rows), outbox_rows()
    assert sum(row.attempts for row in rows) >= INSTANCES // 2, outbox_rows()  # retries ran
    assert not rows.filter(last_error__icontains="deadlock").exists(), outbox_rows()
    assert samples and max(samples) <= CAP, (max(samples), len(samples))
