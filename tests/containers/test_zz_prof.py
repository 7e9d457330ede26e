import time

import pytest
from pyinstrument import Profiler

from containers.services import container_create_by_template
from outbox import relay

pytestmark = pytest.mark.django_db(transaction=True)


def test_profile_handler(template, owner, fake_runtime):
    for _ in range(3):
        container_create_by_template(template=template, owner=owner, actor="t")
    for _ in range(3):
        for i, tok in relay.claim("create", 1):
            relay.execute(i, tok)
    for _ in range(40):
        container_create_by_template(template=template, owner=owner, actor="t")
    p = Profiler(interval=0.0002)
    t = []
    for _ in range(40):
        for i, tok in relay.claim("create", 1):
            t0 = time.perf_counter()
            p.start()
            relay.execute(i, tok)
            p.stop()
            t.append(time.perf_counter() - t0)
    t.sort()
    with open("/tmp/prof/handler_tree.txt", "w") as f:
        f.write(f"p50 {t[len(t) // 2] * 1000:.2f}\n")
        f.write(p.output_text(unicode=False, color=False))
