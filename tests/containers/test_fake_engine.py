"""The file-backed test engine honours the runtime contract under concurrent use.

Every pipeline test runs on it, so a race in it reads as a product failure (it once
made a create handler raise in ``test_two_dispatchers_and_both_clusters_drain_50_instances``).
"""

from __future__ import annotations

from containers.engines.base import ContainerSpec
from containers.engines.fake import FakeEngine


def spec(name: str) -> ContainerSpec:
    return ContainerSpec(
        name=name, image="gobrave-test-busybox:latest", labels={"io.gobrave.installation": "gb"}
    )


def test_inspect_by_id_skips_a_file_removed_while_it_scans(tmp_path):
    """A container file listed by the scan but unlinked before it is read (a concurrent
    ``remove`` in another worker) is skipped: inspect finds the one it was asked for."""
    engine = FakeEngine(f"fake://{tmp_path}")
    runtime_id = engine.create(spec("gb-kept"))
    # A name the scan lists first whose file is gone when it is opened.
    (tmp_path / "containers" / "a-removed.json").symlink_to(tmp_path / "nowhere.json")
    state = engine.inspect(runtime_id)
    assert state is not None and state.name == "gb-kept"
    assert [s.name for s in engine.list_ours("gb")] == ["gb-kept"]


def test_remove_and_inspect_of_a_gone_container_answer_none(tmp_path):
    engine = FakeEngine(f"fake://{tmp_path}")
    runtime_id = engine.create(spec("gb-gone"))
    engine.remove(runtime_id)
    engine.remove(runtime_id)  # idempotent
    assert engine.inspect(runtime_id) is None
    assert engine.inspect("gb-gone") is None
