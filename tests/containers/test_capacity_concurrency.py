"""The create queue's claim guard and the handlers' capacity gate racing on PostgreSQL.

Workers (threads, each on its own connection) claim and run creates that fail once and
come due again fast, so claims of retries (which take the gate in the claim) and fresh
creates' gates (which take it under an instance's row lock) run at the same time. No
lock cycle (PostgreSQL would abort one with a deadlock), and a sampler that counts slots
as contract §4 defines them (``containers.requests.slots``) never sees more than the cap.
"""

from __future__ import annotations

import pytest

from containers.engines import engine_for
from containers.models import ContainerInstance
from containers.requests.services import container_create_by_template
from containers.requests.slots import slot_count
from outbox.models import OutboxEvent
from tests.processes import outbox_rows, relay_workers, sampling, wait_for

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
    with relay_workers(WORKERS) as work, sampling(slot_count, interval=0.001) as samples:
        wait_for(
            lambda: (
                work.errors
                or ContainerInstance.objects.filter(status="running").count() == INSTANCES
            ),
            timeout=120,
            message=f"{INSTANCES} running",
            describe=outbox_rows,
        )
    assert not work.errors, work.errors
    rows = OutboxEvent.objects.all()
    assert all(row.status == "sent" for row in rows), outbox_rows()
    assert sum(row.attempts for row in rows) >= INSTANCES // 2, outbox_rows()  # retries ran
    assert not rows.filter(last_error__icontains="deadlock").exists(), outbox_rows()
    assert samples and max(samples) <= CAP, (max(samples), len(samples))
