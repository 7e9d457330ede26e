"""streams.hub: one read per web process for what many streams watch."""

from __future__ import annotations

import asyncio

import pytest

from containers.live import INSTANCE_STATE
from containers.models import ContainerInstance
from streams.hub import MISSING, Topic, watch
from tests.factories import InstanceFactory

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_watchers_share_one_read_per_tick_and_see_each_change(fake_runtime):
    first = InstanceFactory(status="running", runtime=fake_runtime)
    second = InstanceFactory(status="running", runtime=fake_runtime)
    reads: list[list] = []

    def read(keys):
        reads.append(list(keys))
        return INSTANCE_STATE.read(keys)

    topic = Topic("test-states", read=read, every=0.01)

    async def scenario():
        watchers = [watch(topic, first.pk), watch(topic, first.pk), watch(topic, second.pk)]
        now = [await anext(w) for w in watchers]
        assert [value[0] for value in now] == ["running"] * 3, now
        rounds_before = len(reads)
        await asyncio.to_thread(
            lambda: ContainerInstance.objects.filter(pk=first.pk).update(status="stopped")
        )
        changed = await asyncio.wait_for(anext(watchers[0]), 30)
        also = await asyncio.wait_for(anext(watchers[1]), 30)
        await asyncio.to_thread(lambda: ContainerInstance.objects.filter(pk=second.pk).delete())
        gone = await asyncio.wait_for(anext(watchers[2]), 30)
        for watcher in watchers:
            await watcher.aclose()
        return changed, also, gone, reads[rounds_before:]

    changed, also, gone, later_reads = asyncio.run(scenario())
    assert changed[0] == "stopped" and also[0] == "stopped", (changed, also)
    assert gone is MISSING
    # One read per tick for every watched key together, never one per watcher.
    assert all(
        sorted(map(str, keys)) == sorted([str(first.pk), str(second.pk)])
        for keys in later_reads[:1]
    ), later_reads[:3]
    assert all(len(keys) <= 2 for keys in later_reads), later_reads[:3]
