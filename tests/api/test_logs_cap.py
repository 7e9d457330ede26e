"""GET logs/ without follow is capped in bytes, as the follow stream is, and reads no more
of the engine's output than it shows, whatever the container printed."""

from __future__ import annotations

import pytest

from containers.engines import engine_for
from containers.engines.base import ContainerSpec
from containers.engines.calls import LOG_MAX_BYTES, container_logs_for_console
from containers.engines.fake import FakeEngine

pytestmark = pytest.mark.django_db

LINE = 199  # bytes before the newline: 200 a line


@pytest.fixture
def chatty(make_instance, fake_runtime):
    """A running instance whose container printed 20,000 lines of 200 bytes (4 MB)."""
    instance = make_instance("running")
    engine = engine_for(fake_runtime)
    engine.create(ContainerSpec(name=instance.container_name, image="busybox", labels={}))
    lines = (f"{i:05d}".ljust(LINE, "x") + "\n" for i in range(20_000))
    (engine.root / "output").write_text("".join(lines))
    return instance


def test_a_tail_larger_than_the_cap_is_cut_and_says_where(alice, chatty):
    response = alice.get(f"/api/containers/{chatty.pk}/logs/?tail=10000")
    assert response.status_code == 200, response.content[:300]
    text = response.json()["logs"]
    shown, _, note = text.rpartition("\n[gobrave: ")
    assert note.startswith("output cut at 1 MiB"), text[-300:]
    assert len(shown.encode()) == LOG_MAX_BYTES, text[-300:]
    assert response["X-Gobrave-Truncated"] == str(LOG_MAX_BYTES), dict(response.headers)
    assert shown.startswith("10000x"), shown[:100]  # the tail's first line: the last 10,000


def test_a_small_tail_is_whole_and_not_marked(alice, chatty):
    response = alice.get(f"/api/containers/{chatty.pk}/logs/?tail=3")
    lines = response.json()["logs"].splitlines()
    assert [line[:5] for line in lines] == ["19997", "19998", "19999"], lines
    assert "X-Gobrave-Truncated" not in response, dict(response.headers)


def test_a_container_printing_without_end_is_read_only_up_to_the_cap(
    alice, make_instance, monkeypatch
):
    read = []

    def endless(self, ref, tail=100):
        while True:
            read.append(64 * 1024)
            yield b"y" * (64 * 1024)

    monkeypatch.setattr(FakeEngine, "logs", endless)
    instance = make_instance("running")
    response = alice.get(f"/api/containers/{instance.pk}/logs/?tail=10000")
    assert response.status_code == 200, response.content[:300]
    assert response["X-Gobrave-Truncated"] == str(LOG_MAX_BYTES), dict(response.headers)
    assert sum(read) <= LOG_MAX_BYTES + 64 * 1024, f"read {sum(read)} bytes"


def test_the_admin_page_logs_are_capped_too(chatty):
    logs, problem = container_logs_for_console(instance=chatty, tail=10_000)
    assert problem == "" and "[gobrave: output cut at 1 MiB" in logs[-200:], (problem, logs[-200:])
    assert len(logs.encode()) < LOG_MAX_BYTES + 200
