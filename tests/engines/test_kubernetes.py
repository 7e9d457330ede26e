"""The Kubernetes driver's mapping (what the contract suite cannot say for every driver):
the Pod it makes, where secret values go, the state table, the watch's relist on 410,
the node name backfill, what it refuses, the quota deferral, the Role it needs, and one
instance's whole life through the services and the handlers.

On ``kube_cluster``: the API emulator and fake kubelet of ``tests/kube``.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from containers.engines.base import ContainerSpec, EngineEvent, Mount, PermanentEngineError
from containers.engines.kubernetes import pods, states
from containers.engines.kubernetes.engine import KubernetesEngine
from containers.engines.labels import LABEL_INSTALLATION, LABEL_INSTANCE, LABEL_TEMPLATE
from containers.execution.observe import target_for
from containers.states import Status
from tests.engines.kube_harness import engine_for_cluster
from tests.processes import PATIENCE

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "deploy" / "kubernetes" / "base" / "role.yaml"
WEB_ROLE = ROLE.with_name("web-role.yaml")
IMAGE = "gobrave-test-busybox:latest"
SECRET_VALUE = "s3cr3t-value-7f1e"


@pytest.fixture
def engine(kube) -> KubernetesEngine:
    return engine_for_cluster(kube)


def spec(name: str = "gb-pod", **extra: Any) -> ContainerSpec:
    labels = {
        LABEL_INSTALLATION: "inst1",
        LABEL_INSTANCE: extra.pop("instance", f"id-{name}"),
        LABEL_TEMPLATE: extra.pop("template", "web"),
    }
    extra.setdefault("user", "10001:10001")
    extra.setdefault("group_add", ["10001"])
    return ContainerSpec(name=name, image=IMAGE, labels=labels, **extra)


def raw_pod(kube, name: str) -> dict[str, Any]:
    with kube.api_client() as api:
        response = client.CoreV1Api(api).read_namespaced_pod(
            name, kube.namespace, _preload_content=False
        )
        return json.loads(response.data)


def wait_status(
    engine: KubernetesEngine,
    ref: str,
    wanted: set[str],
    timeout: float = 10,
    until: Callable[[Any], bool] = lambda state: True,
):
    """Wait (a deadline) until ``ref``'s status is one of ``wanted`` and ``until(state)``."""
    deadline = time.monotonic() + timeout * PATIENCE
    while True:
        state = engine.inspect(ref)
        if state is not None and state.status in wanted and until(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{ref}: wanted {wanted}, still {state}")
        time.sleep(0.02)


# --- the Pod ------------------------------------------------------------------------------


def test_the_pod_carries_the_restricted_profile_resources_and_gobraves_labels(kube, engine):
    long_template = "Data Science Notebook (GPU, large) " * 3
    made = spec(
        command=["sleep", "60"],
        cpu=0.5,
        memory=256 * 2**20,
        cap_add=["NET_BIND_SERVICE"],
        read_only_rootfs=True,
        tmpfs_size=64 * 2**20,
        node_selector={"disktype": "ssd"},
        mounts=[Mount("gobrave-ws-7", "/home/user", type="volume", workspace=True)],
        template=long_template,
    )
    kube.enforce_pod_security("restricted")  # the API server admits the Pod under it
    engine.start(engine.create(made), made)
    pod = raw_pod(kube, "gb-pod")
    body, container = pod["spec"], pod["spec"]["containers"][0]
    assert body["restartPolicy"] == "Never"
    assert body["automountServiceAccountToken"] is False
    assert container["args"] == ["sleep", "60"] and "command" not in container
    assert body["securityContext"]["runAsNonRoot"] is True
    assert (body["securityContext"]["runAsUser"], body["securityContext"]["fsGroup"]) == (
        10001,
        10001,
    )
    assert body["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert security["readOnlyRootFilesystem"] is True
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": str(256 * 2**20)},
        "limits": {"cpu": "500m", "memory": str(256 * 2**20)},
    }
    assert body["nodeSelector"] == {"disktype": "ssd"}
    assert {(t["key"], "tolerationSeconds" in t) for t in body["tolerations"]} == {
        ("node.kubernetes.io/unreachable", False),
        ("node.kubernetes.io/not-ready", False),
    }
    # A ReadWriteOnce claim: the owner's Pods go where the claim's other Pods are.
    [term] = body["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["labelSelector"]["matchLabels"] == {"ws.gobrave.io/gobrave-ws-7": "1"}
    # Labels cleaned to 63 characters of the label alphabet; the full value annotated.
    label = pod["metadata"]["labels"][LABEL_TEMPLATE]
    assert len(label) <= 63 and " " not in label
    assert pod["metadata"]["annotations"][LABEL_TEMPLATE] == long_template
    assert engine.inspect("gb-pod").labels[LABEL_TEMPLATE] == long_template


def test_a_readwritemany_claim_places_the_pod_anywhere():
    made = spec(mounts=[Mount("gobrave-ws-7", "/w", type="volume", workspace=True)])
    assert "affinity" not in pods.pod_manifest(made, access_mode="ReadWriteMany")["spec"]
    assert "affinity" in pods.pod_manifest(made, access_mode="ReadWriteOnce")["spec"]


def test_secret_env_goes_into_a_secret_never_into_the_pod_and_goes_with_the_instance(kube, engine):
    made = spec(env={"TOKEN": SECRET_VALUE, "MODE": "on"}, secret_env=["TOKEN"])
    engine.start(engine.create(made), made)
    pod = raw_pod(kube, "gb-pod")
    assert SECRET_VALUE not in json.dumps(pod)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["MODE"]["value"] == "on"
    assert env["TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "gb-pod-env", "key": "TOKEN"}
    with kube.api_client() as api:
        core = client.CoreV1Api(api)
        secret = json.loads(
            core.read_namespaced_secret("gb-pod-env", kube.namespace, _preload_content=False).data
        )
        stored = secret.get("data", {}).get("TOKEN")
        value = base64.b64decode(stored).decode() if stored else secret["stringData"]["TOKEN"]
        assert value == SECRET_VALUE
        engine.stop("gb-pod", 1)  # a stop keeps the Secret: a start needs it
        core.read_namespaced_secret("gb-pod-env", kube.namespace)
        engine.remove("gb-pod")
        with pytest.raises(client.ApiException) as gone:
            core.read_namespaced_secret("gb-pod-env", kube.namespace)
        assert gone.value.status == 404


def test_a_stop_or_remove_leaves_a_pod_and_a_secret_that_are_not_gobraves(kube, engine):
    """A foreign object holding an instance's names (a create refused it) is never
    deleted: not by a stop, not by the remove of the failed instance's delete."""
    with kube.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(
            kube.namespace,
            {
                "metadata": {"name": "gb-pod"},
                "spec": {"containers": [{"name": "main", "image": IMAGE}]},
            },
        )
        core.create_namespaced_secret(
            kube.namespace, {"metadata": {"name": "gb-pod-env"}, "stringData": {"K": "v"}}
        )
        with pytest.raises(PermanentEngineError, match="held by another"):
            engine.create(spec())
        engine.stop("gb-pod", 1)
        engine.remove("gb-pod")
        pod = core.read_namespaced_pod("gb-pod", kube.namespace)  # both still there
        assert pod.metadata.deletion_timestamp is None, pod.metadata
        core.read_namespaced_secret("gb-pod-env", kube.namespace)


def test_remove_volume_leaves_a_claim_that_is_not_gobraves(kube, engine):
    from containers.engines.base import Workspace as WorkspaceSpec
    from containers.engines.kubernetes import names

    claim = names.claim_name("gobrave-ws-foreign")
    with kube.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_persistent_volume_claim(
            kube.namespace,
            {
                "metadata": {"name": claim},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
        workspace = WorkspaceSpec(
            "volume", "gobrave-ws-foreign", 10001, 10001, {LABEL_INSTALLATION: "inst1"}
        )
        with pytest.raises(PermanentEngineError, match="held by another"):
            engine.ensure_workspace(workspace, image=IMAGE)
        engine.remove_volume("gobrave-ws-foreign")
        held = core.read_namespaced_persistent_volume_claim(claim, kube.namespace)
        assert held.metadata.deletion_timestamp is None, held.metadata
        core.delete_namespaced_persistent_volume_claim(claim, kube.namespace)
        ours = WorkspaceSpec("volume", "gobrave-ws-ours", 10001, 10001, {LABEL_INSTALLATION: "i"})
        engine.ensure_workspace(ours, image=IMAGE)
        engine.remove_volume("gobrave-ws-ours")
        with pytest.raises(client.ApiException) as gone:
            core.read_namespaced_persistent_volume_claim(
                names.claim_name("gobrave-ws-ours"), kube.namespace
            )
        assert gone.value.status == 404


@pytest.mark.parametrize(
    ("changed", "refusal"),
    [
        ({"user": None}, "the image's user"),
        ({"user": "0:0"}, "as root"),
        ({"mounts": [Mount("/srv/data", "/data")]}, "host paths"),
        ({"network": "host"}, "host's network"),
        ({"network": "none"}, "network none is refused"),
        ({"network": "gb-net-inst-7"}, "network gb-net-inst-7 is refused"),
    ],
)
def test_what_restricted_forbids_is_refused_with_a_clear_error(changed, refusal):
    made = spec(**changed)
    assert any(refusal in problem for problem in pods.refusals(made))
    with pytest.raises(PermanentEngineError, match=refusal):
        pods.pod_manifest(made)


# --- the state table ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "status", "check"),
    [
        (
            {"unschedulable": "0/1 nodes are available: 1 Insufficient cpu."},
            "created",
            lambda s: s.error == "waiting for a node: 0/1 nodes are available: 1 Insufficient cpu.",
        ),
        ({"image_error": "ErrImagePull"}, "rejected", lambda s: "not found" in s.error),
        ({"image_error": "InvalidImageName"}, "rejected", lambda s: "InvalidImageName" in s.error),
        ({"exit_code": 3}, "exited", lambda s: s.exit_code == 3 and not s.oom_killed),
        ({"oom": True}, "exited", lambda s: s.oom_killed and s.exit_code == 137),
        ({"node_lost": True}, "unknown", lambda s: "stopped reporting" in s.error),
    ],
)
def test_the_state_table_on_the_kubelets_rules(
    kube, engine, rule: dict, status: str, check: Callable
):
    kube.kubelet.add_rule(name="gb-pod", **rule)
    made = spec()
    engine.start(engine.create(made), made)
    # A Pod is ``created`` from the moment it exists: wait for what the rule makes of it.
    state = wait_status(engine, "gb-pod", {status}, until=check)
    assert check(state), state


def test_what_the_states_imply_for_an_instance():
    def observed(status: str, current: str = Status.CREATING, **fields):
        state = states.ContainerState("p", "p", status, **fields)
        return target_for(state, current)

    assert observed("created", error="waiting for a node: no room") is None  # waits
    assert observed("unknown", error="the node stopped reporting") is None  # keeps its state
    assert observed("removing") is None
    rejected = observed("rejected", error="cannot pull image: ErrImagePull: not found")
    assert (rejected.target, rejected.reason) == (Status.FAILED, "cannot pull image: "
                                                  "ErrImagePull: not found")  # fmt: skip
    oom = observed("exited", Status.RUNNING, exit_code=137, oom_killed=True)
    assert (oom.target, oom.reason) == (Status.FAILED, "OOMKilled")  # Docker's reason


def test_the_docs_state_table_is_the_codes():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    for pod_says, status, _ in states.TABLE:
        assert f"| {pod_says} | `{status}` |" in docs, pod_says


# --- events ------------------------------------------------------------------------------


def _drain(
    engine: KubernetesEngine,
    since: str,
    until: Callable[[list], bool],
    installation: str = "inst1",
) -> list:
    seen: list[EngineEvent] = []
    deadline = time.monotonic() + 15 * PATIENCE
    cursor = since
    while not until(seen) and time.monotonic() < deadline:
        stream = engine.events(installation, cursor)
        try:
            for event in stream:
                seen.append(event)
                cursor = event.cursor
                if until(seen):
                    break
        finally:
            stream.close()  # the watch ends with its reader
    return seen


def test_a_cursor_past_the_history_relists_and_misses_no_transition(kube, engine):
    """410 Gone: the watch lists again, reports what changed meanwhile (an exit, a Pod
    gone), then moves the cursor to the list's version; no transition twice."""
    kube.kubelet.add_rule(name="gb-exits", exit_code=0, on_trigger=True)
    exits, goes = spec("gb-exits"), spec("gb-goes")
    since = engine.event_cursor_now()
    for made in (exits, goes):
        engine.start(engine.create(made), made)

    def both_started(seen: list[EngineEvent]) -> bool:
        return {e.runtime_id for e in seen if e.action == "start"} == {"gb-exits", "gb-goes"}

    assert both_started(_drain(engine, since, both_started))  # this process saw both
    old = engine.event_cursor_now()
    kube.emulator.set_history_limit(2)
    kube.kubelet.trigger(kube.namespace, "gb-exits")
    wait_status(engine, "gb-exits", {"exited"})
    engine.remove("gb-goes")
    for index in range(4):  # changes enough to push ``old`` out of the history
        with kube.api_client() as api:
            client.CoreV1Api(api).create_namespaced_secret(
                kube.namespace, {"metadata": {"name": f"filler-{index}"}}
            )
    events = _drain(engine, old, lambda seen: any(e.action == "resync" for e in seen))
    happened = [(e.runtime_id, e.action) for e in events if e.runtime_id]
    assert ("gb-exits", "die") in happened and ("gb-goes", "destroy") in happened, happened
    assert len(happened) == len(set(happened)), happened  # nothing twice
    assert events[-1].action == "resync" and events[-1].cursor != old
    lists = [c for c in kube.emulator.calls if c.verb == "list" and c.resource == "pods"]
    assert lists, kube.emulator.calls


def test_a_dropped_stream_ends_and_resumes_from_its_cursor_without_repeats(kube, engine):
    made = spec()
    since = engine.event_cursor_now()
    engine.start(engine.create(made), made)
    wait_status(engine, "gb-pod", {"running"})
    first = _drain(engine, since, lambda seen: any(e.action == "start" for e in seen))
    assert ("gb-pod", "start") in [(e.runtime_id, e.action) for e in first]
    kube.kubelet.finish(kube.namespace, "gb-pod", 4)
    later = _drain(engine, first[-1].cursor, lambda seen: any(e.action == "die" for e in seen))
    actions = [(e.runtime_id, e.action, e.exit_code) for e in later]
    assert ("gb-pod", "die", 4) in actions and ("gb-pod", "start", None) not in actions, actions


def test_a_pod_that_waited_for_a_node_reports_when_it_is_placed(kube, engine):
    """Scheduled after waiting for a node, a Pod that does not run yet (its image being
    pulled) is a ``place`` event: the monitor hears that the wait is over."""
    kube.kubelet.add_rule(name="gb-pod", unschedulable="0/1 nodes are available.")
    since = engine.event_cursor_now()
    made = spec()
    engine.start(engine.create(made), made)

    def has(action: str) -> Callable[[list], bool]:
        return lambda seen: any(e.action == action for e in seen)

    waited = _drain(engine, since, has("wait"))
    assert [e.action for e in waited if e.runtime_id == "gb-pod"] == ["create", "wait"], waited
    kube.kubelet.add_rule(name="gb-pod", pulling=True)  # a node frees; the pull is slow
    placed = _drain(engine, waited[-1].cursor, has("place"))
    assert [e.action for e in placed if e.runtime_id == "gb-pod"] == ["place"], placed
    state = engine.inspect("gb-pod")
    assert (state.status, state.waiting, state.node_name) == ("created", False, "kube-node-1")
    kube.kubelet.trigger(kube.namespace, "gb-pod")
    started = _drain(engine, placed[-1].cursor, has("start"))
    assert [e.action for e in started if e.runtime_id == "gb-pod"] == ["start"], started


# --- the role -----------------------------------------------------------------------------


def test_every_call_of_a_whole_lifecycle_is_granted_by_the_role(kube, engine):
    if not ROLE.exists():
        pytest.skip("deploy/kubernetes/base/role.yaml is not on this branch yet")
    import asyncio

    from containers.engines.base import Workspace

    kube.kubelet.add_rule(name="gb-pod", logs=["hello"])
    made = spec(
        env={"TOKEN": SECRET_VALUE},
        secret_env=["TOKEN"],
        mounts=[Mount("gobrave-ws-1", "/w", type="volume", workspace=True)],
    )
    engine.check()
    since = engine.event_cursor_now()
    engine.ensure_workspace(
        Workspace("volume", "gobrave-ws-1", 10001, 10001, {LABEL_INSTALLATION: "inst1"}),
        image=IMAGE,
    )
    engine.start(engine.create(made), made)
    engine.create(made)  # a retried create adopts (and patches) its Secret
    wait_status(engine, "gb-pod", {"running"})
    b"".join(engine.logs("gb-pod", tail=5))

    async def follow() -> None:
        stream = await engine.follow_logs("gb-pod", tail=5, until=time.time() + 0.3)
        [chunk async for chunk in stream]

    asyncio.run(follow())
    engine.list_ours("inst1")
    list(engine.events("inst1", since))
    engine.stop("gb-pod", 1)
    engine.start("gb-pod", made)
    engine.remove("gb-pod")
    engine.remove_volume("gobrave-ws-1")
    from tests.kube.rbac import uncovered

    [role] = [d for d in yaml.safe_load_all(ROLE.read_text()) if d and d["kind"] == "Role"]
    assert uncovered(kube.emulator.calls, role) == []


# The web tier's modules, and the functions through which they reach an engine: the
# admin's and the API's, named as those modules call them (``calls.X``, or imported from
# ``containers.execution``). The test below drives every one of them.
WEB_MODULES = ("containers/admin", "containers/api", "containers/live.py")
WEB_ENGINE_PATHS = {
    "container_logs",
    "container_logs_for_console",
    "container_logs_follow",
    "runtime_health_check",
    "orphan_remove",
    "template_images_refresh",
    "workspace_remove",
    "workspace_sizes_refresh",
}


def _web_engine_paths() -> set[str]:
    import ast

    found = set()
    for entry in WEB_MODULES:
        path = REPO / entry
        for module in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            for node in ast.walk(ast.parse(module.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "containers.execution"
                ):
                    found |= {alias.name for alias in node.names}
                elif (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "calls"
                    and not node.attr.isupper()  # constants, not calls
                ):
                    found.add(node.attr)
    return found


def test_the_web_tier_reaches_engines_only_through_the_paths_its_role_is_tested_on():
    assert _web_engine_paths() == WEB_ENGINE_PATHS


@pytest.mark.django_db(transaction=True)
def test_every_call_of_the_web_tier_is_granted_by_the_webs_role_and_each_grant_is_used(
    kube, kube_runtime, owner, engine
):
    """The web's Role (deploy/kubernetes/base/web-role.yaml) against what the web tier's
    engine paths (``WEB_ENGINE_PATHS``) call on the emulator: all granted, nothing more."""
    import asyncio

    from containers.engines import calls
    from containers.engines.base import Workspace as WorkspaceSpec
    from containers.execution.health import runtime_health_check
    from containers.execution.housekeeping import orphan_remove, workspace_remove
    from containers.execution.images import template_images_refresh
    from containers.execution.workspaces import workspace_sizes_refresh
    from containers.models import ContainerInstance, OrphanContainer, Workspace
    from tests.factories import TemplateFactory
    from tests.kube.rbac import uncovered

    kube.kubelet.add_rule(name="gb-pod", logs=["hello web"])
    made = spec(
        env={"TOKEN": SECRET_VALUE},
        secret_env=["TOKEN"],
        mounts=[Mount("gobrave-ws-1", "/w", type="volume", workspace=True)],
    )
    engine.ensure_workspace(
        WorkspaceSpec("volume", "gobrave-ws-1", 10001, 10001, {LABEL_INSTALLATION: "inst1"}),
        image=IMAGE,
    )
    engine.start(engine.create(made), made)
    wait_status(engine, "gb-pod", {"running"})
    template = TemplateFactory(name="kube-web-role", constraints={"engine": "kube"})
    instance = ContainerInstance(  # never saved: the web paths read what they are given
        owner=owner, name="web", runtime=kube_runtime, container_id="gb-pod", status="running"
    )
    web_started = len(kube.emulator.calls)
    assert "hello web" in calls.container_logs(instance=instance, tail=5).text
    assert "hello web" in calls.container_logs_for_console(instance=instance, tail=5)[0]

    async def follow() -> bytes:
        stream = await calls.container_logs_follow(instance=instance, tail=5, seconds=0.3)
        return b"".join([chunk async for chunk in stream])

    assert b"hello web" in asyncio.run(follow())
    assert runtime_health_check(runtime=kube_runtime, seconds=60) is True
    template_images_refresh(templates=[template])
    workspace = Workspace.objects.create(
        runtime=kube_runtime, owner=owner, kind="volume", source="gobrave-ws-1", uid=1, gid=1
    )
    assert workspace_sizes_refresh(workspaces=[workspace]) == []
    orphan = OrphanContainer.objects.create(
        runtime=kube_runtime, container_id="gb-pod", name="gb-pod", labels=made.labels
    )
    assert orphan_remove(orphan=orphan, actor="t").removed_at is not None
    workspace_remove(workspace_id=workspace.pk, actor="t")
    web_calls = kube.emulator.calls[web_started:]
    [role] = [d for d in yaml.safe_load_all(WEB_ROLE.read_text()) if d and d["kind"] == "Role"]
    assert uncovered(web_calls, role) == []
    used = {(c.group, f"{c.resource}/{c.subresource}" if c.subresource else c.resource, c.verb)
            for c in web_calls}  # fmt: skip
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == used, (granted - used, used - granted)


# --- through the services and the handlers ------------------------------------------------


@pytest.fixture
def kube_runtime(kube):
    return kube.runtime_row()


def _settle(instance, wanted: str, timeout: float = 10):
    """Reconcile (as the monitor's loop would) until the instance is ``wanted``."""
    from containers.execution.reconciler import reconcile
    from containers.models import ContainerInstance

    deadline = time.monotonic() + timeout * PATIENCE
    while True:
        reconcile()
        row = ContainerInstance.objects.get(pk=instance.pk)
        if row.status == wanted:
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"wanted {wanted}: {row.status} ({row.status_reason})")


@pytest.mark.django_db(transaction=True)
def test_an_instance_is_created_stopped_started_and_deleted_on_kubernetes(
    kube, kube_runtime, owner
):
    from containers.models import ContainerEvent, ContainerInstance
    from containers.requests.services import (
        container_create_by_template,
        container_delete,
        container_start,
        container_stop,
    )
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    template = TemplateFactory(
        name="kube-web", constraints={"engine": "kube"}, env={"K": SECRET_VALUE}, secret_env=["K"]
    )
    kube.enforce_pod_security("restricted")
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"]
    row = _settle(instance, "running")
    assert row.runtime_node_name == "kube-node-1"  # backfilled from spec.nodeName
    assert SECRET_VALUE not in json.dumps(raw_pod(kube, row.container_name))
    container_stop(instance_id=row.pk, actor="t")
    assert relay_drain() == ["sent"]
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.runtime_missing) == ("stopped", False)  # no Pod: normal
    _settle(instance, "stopped")  # a reconcile leaves it so
    container_start(instance_id=row.pk, actor="t")
    assert relay_drain() == ["sent"]
    row = _settle(instance, "running")
    container_delete(instance_id=row.pk, actor="t")
    assert relay_drain() == ["sent"]
    assert not ContainerInstance.objects.filter(pk=instance.pk).exists()
    assert ContainerEvent.objects.filter(instance_id=instance.pk, kind="ContainerDeleted").exists()
    with kube.api_client() as api:
        left = client.CoreV1Api(api).list_namespaced_pod(kube.namespace).items
    assert [p.metadata.name for p in left] == []


@pytest.mark.django_db(transaction=True)
def test_a_namespace_quota_that_refuses_the_pod_defers_the_create(kube, kube_runtime, owner):
    from containers.models import ContainerInstance
    from containers.requests.services import container_create_by_template
    from outbox.models import OutboxEvent
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    kube.emulator.set_quota(kube.namespace, {"pods": "0"})
    template = TemplateFactory(name="kube-q", constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain(rounds=1) == ["deferred"]
    row = OutboxEvent.objects.get(aggregate_id=str(instance.pk))
    assert (row.status, row.attempts) == ("pending", 0), (row.status, row.attempts)
    stored = ContainerInstance.objects.get(pk=instance.pk)
    assert "quota" in stored.status_reason.lower(), stored.status_reason
    assert stored.status in ("pending", "creating")


# --- templates ---------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "refusal"),
    [
        ({"security": {"user": "image"}}, "the image's user is refused on Kubernetes"),
        ({"security": {"user": 0}}, "root is refused on Kubernetes"),
        ({"security": {"cap_add": ["NET_RAW"]}}, "NET_RAW refused on Kubernetes"),
        ({"volumes": [{"source": "/srv/data", "target": "/data"}]}, "host paths are refused"),
        ({"security": {"network": "none"}}, "network: none is refused on Kubernetes"),
        ({"security": {"network": "owner"}}, "network: owner is refused on Kubernetes"),
    ],
)
def test_a_template_that_could_run_on_kubernetes_is_refused_what_restricted_forbids(
    gobrave_config, fields, refusal
):
    from django.conf import settings

    from containers.errors import InvalidSpec
    from containers.models import ContainerTemplate, Runtime
    from containers.spec.template_services import template_create
    from tests.factories import RuntimeFactory

    security = {
        **settings.GOBRAVE["container"]["security"],
        "capabilities_allowed": ["NET_RAW", "NET_BIND_SERVICE"],
    }
    gobrave_config(container={"allowed_volume_roots": ["/srv"], "security": security})
    RuntimeFactory(name="k", driver=Runtime.Driver.KUBERNETES, labels={"engine": "kube"})
    base = {"name": "t", "image": IMAGE, "constraints": {"engine": "kube"}}
    with pytest.raises(InvalidSpec, match=refusal) as refused:
        template_create(**base, **fields)
    assert "runtime k" in refused.value.message
    assert not ContainerTemplate.objects.filter(name="t").exists()
    # The same template for Docker runtimes only is fine.
    template_create(**{**base, "constraints": {"engine": "docker"}}, **fields)


@pytest.mark.django_db(transaction=True)
def test_a_pod_waiting_for_a_node_holds_no_slot_and_only_unschedulable_timeout_fails_it(
    kube, kube_runtime, owner, gobrave_config
):
    import datetime as dt

    from django.utils import timezone

    from containers.execution.reconciler import reconcile
    from containers.models import ContainerInstance
    from containers.requests.services import container_create_by_template
    from containers.requests.slots import slot_count
    from outbox.models import OutboxEvent
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    kube.kubelet.add_rule(labels={}, unschedulable="0/1 nodes are available: 1 Insufficient cpu.")
    template = TemplateFactory(name="kube-big", constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"]
    deadline = time.monotonic() + 10 * PATIENCE
    while True:
        reconcile()
        row = ContainerInstance.objects.get(pk=instance.pk)
        if row.engine_waiting_since is not None or time.monotonic() > deadline:
            break
    assert row.status == "creating", (row.status, row.status_reason)
    assert row.status_reason == "waiting for a node: 0/1 nodes are available: 1 Insufficient cpu."
    assert slot_count() == 0  # the API server accepted it: gobrave's work is done
    # Long past start_timeout: it does not run while the cluster waits for a node.
    long_ago = timezone.now() - dt.timedelta(hours=1)
    OutboxEvent.objects.filter(aggregate_id=str(instance.pk)).update(started_at=long_ago)
    reconcile()
    assert ContainerInstance.objects.get(pk=instance.pk).status == "creating"
    # unschedulable_timeout (empty by default) bounds the wait.
    gobrave_config(container={"unschedulable_timeout": 60.0})
    ContainerInstance.objects.filter(pk=instance.pk).update(engine_waiting_since=long_ago)
    reconcile()
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert row.status == "failed" and row.status_reason.startswith("unschedulable_timeout"), (
        row.status_reason
    )


@pytest.mark.django_db(transaction=True)
def test_a_pod_placed_after_waiting_clears_the_reason_takes_no_slot_and_times_out_later(
    kube, kube_runtime, owner
):
    """Scheduled after a wait past ``start_timeout``: the monitor's event clears the
    reason; the instance takes no slot (none outside the capacity gate) and is not failed
    for the time it waited, but ``start_timeout`` bounds it again from its placement."""
    import datetime as dt

    from django.utils import timezone

    from containers.execution.monitor import cursor_for, event_apply
    from containers.execution.reconciler import reconcile
    from containers.installation import installation_id
    from containers.models import ContainerInstance
    from containers.requests.services import container_create_by_template
    from containers.requests.slots import slot_count
    from outbox.models import OutboxEvent
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    kube.kubelet.add_rule(labels={}, unschedulable="0/1 nodes are available: 1 Insufficient cpu.")
    template = TemplateFactory(name="kube-later", constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"]
    deadline = time.monotonic() + 10 * PATIENCE
    row = ContainerInstance.objects.get(pk=instance.pk)
    while row.engine_waiting_since is None and time.monotonic() < deadline:
        reconcile()
        row = ContainerInstance.objects.get(pk=instance.pk)
    assert row.status_reason.startswith("waiting for a node: "), row.status_reason
    # It waited most of an hour; its attempt began an hour ago (start_timeout is 300 s).
    now = timezone.now()
    OutboxEvent.objects.filter(aggregate_id=str(instance.pk)).update(
        started_at=now - dt.timedelta(hours=1)
    )
    ContainerInstance.objects.filter(pk=instance.pk).update(
        engine_waiting_since=now - dt.timedelta(minutes=59)
    )
    watcher = engine_for_cluster(kube)  # as a monitor started during the wait: it saw none
    since = watcher.event_cursor_now()
    kube.kubelet.add_rule(labels={}, pulling=True)  # a node frees; the pull is slow
    events = _drain(
        watcher, since, lambda seen: any(e.action == "place" for e in seen), installation_id()
    )
    cursor = cursor_for(kube_runtime)
    for event in events:
        event_apply(runtime=kube_runtime, cursor=cursor, event=event)
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.status_reason) == ("creating", ""), (row.status, row.status_reason)
    assert row.engine_placed_at is not None and row.engine_waiting_since is not None, row
    assert slot_count() == 0  # taking one now would pass no gate
    reconcile()
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.status_reason) == ("creating", ""), (row.status, row.status_reason)
    assert slot_count() == 0
    # 60 s of its attempt before the wait and 250 s since its placement: past 300 s.
    ContainerInstance.objects.filter(pk=instance.pk).update(
        engine_placed_at=timezone.now() - dt.timedelta(seconds=250)
    )
    reconcile()
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert row.status == "failed", (row.status, row.status_reason)
    counted = re.search(r"for (\d+)s, not counting (\d+)s waiting", row.status_reason)
    assert row.status_reason.startswith("start_timeout: ") and counted, row.status_reason
    assert 305 <= int(counted[1]) <= 315 and int(counted[2]) >= 3290, row.status_reason
    assert (row.engine_waiting_since, row.engine_placed_at) == (None, None)


@pytest.mark.django_db
def test_node_constraints_go_to_engines_that_honour_them_and_into_the_node_selector(tmp_path):
    from containers.errors import NoMatchingRuntime
    from containers.models import Runtime
    from containers.placement.choice import runtime_select
    from tests.factories import RuntimeFactory, TemplateFactory

    RuntimeFactory(name="a-fake", base_url=f"fake://{tmp_path}", labels={"zone": "eu"})
    template = TemplateFactory(name="ssd", constraints={"zone": "eu", "node.disktype": "ssd"})
    with pytest.raises(NoMatchingRuntime):  # the fake (like Docker) cannot honour node.*
        runtime_select(template=template)
    kube = RuntimeFactory(
        name="k", driver=Runtime.Driver.KUBERNETES, kube_namespace="ns", labels={"zone": "eu"}
    )
    assert runtime_select(template=template) == kube  # node.* is not a runtime label
    from containers.spec.resolve import node_selector

    assert node_selector({"zone": "eu", "node.disktype": "ssd"}) == {"disktype": "ssd"}


@pytest.mark.django_db(transaction=True)
def test_a_lost_node_keeps_the_instance_running_with_the_reason(kube, kube_runtime, owner):
    from containers.execution.reconciler import reconcile
    from containers.models import ContainerInstance
    from containers.requests.services import container_create_by_template
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    template = TemplateFactory(name="kube-lost", constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"]
    row = _settle(instance, "running")
    kube.kubelet.lose_node(kube.namespace, row.container_name)
    deadline = time.monotonic() + 10 * PATIENCE
    while not row.status_reason and time.monotonic() < deadline:
        reconcile()
        row = ContainerInstance.objects.get(pk=instance.pk)
    assert row.status == "running", (row.status, row.status_reason)
    assert row.status_reason.startswith("no word from its node: "), row.status_reason


@pytest.mark.django_db(transaction=True)
def test_past_engine_lost_after_an_instance_on_a_silent_node_is_given_up(
    kube, kube_runtime, owner, gobrave_config
):
    """The API server answers but the Pod's node is silent: ``engine_lost_after`` bounds
    the wait of that instance as it bounds a whole engine's (once, with a history entry;
    the orphan scan then removes the Pod it gave up)."""
    import datetime as dt

    from django.utils import timezone

    from containers.execution.reconciler import reconcile
    from containers.models import ContainerEvent, ContainerInstance
    from containers.requests.services import container_create_by_template
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    gobrave_config(container={"engine_lost_after": 60.0})
    template = TemplateFactory(name="kube-gone", constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"]
    row = _settle(instance, "running")
    kube.kubelet.lose_node(kube.namespace, row.container_name)
    deadline = time.monotonic() + 10 * PATIENCE
    while row.engine_silent_since is None and time.monotonic() < deadline:
        reconcile()
        row = ContainerInstance.objects.get(pk=instance.pk)
    assert row.status == "running", (row.status, row.status_reason)
    assert row.engine_silent_since is not None, row.status_reason
    reconcile()  # within the bound: kept
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.runtime_missing) == ("running", False), row.status_reason
    ContainerInstance.objects.filter(pk=instance.pk).update(
        engine_silent_since=timezone.now() - dt.timedelta(seconds=61)
    )
    reconcile()
    reconcile()  # idempotent: given up once
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.runtime_missing) == ("failed", True), row.status_reason
    assert row.status_reason.startswith("engine lost: no word from its node "), row.status_reason
    assert "engine_lost_after (60 s)" in row.status_reason, row.status_reason
    assert row.engine_silent_since is None
    lost = list(
        ContainerEvent.objects.filter(instance_id=instance.pk, kind="engine_lost").values_list(
            "from_status", "to_status", "message"
        )
    )
    assert [entry[:2] for entry in lost] == [("running", "failed")], lost
    deadline = time.monotonic() + 10 * PATIENCE
    while engine_for_cluster(kube).inspect(row.container_name) is not None:
        assert time.monotonic() < deadline, "the Pod given up was not removed"
        reconcile()


@pytest.mark.django_db(transaction=True)
def test_a_node_that_reports_again_clears_the_silence(kube, kube_runtime, owner):
    """A silence recorded and then a Pod heard from again (a state other than Unknown):
    the reason and ``engine_silent_since`` clear, so a later silence counts anew."""
    from django.db import transaction

    from containers.engines.base import ContainerState
    from containers.execution.sync import state_apply
    from containers.models import ContainerInstance
    from containers.requests.lifecycle import instance_lock
    from containers.requests.services import container_create_by_template
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    template = TemplateFactory(name="kube-back", constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"]
    row = _settle(instance, "running")
    silent = ContainerState(runtime_id=row.container_id, name=row.container_name, status="unknown")
    back = ContainerState(runtime_id=row.container_id, name=row.container_name, status="running")
    for state in (silent, back):
        with transaction.atomic():
            assert state_apply(instance_lock(instance.pk), state, actor="t") is False
        if state is silent:
            row = ContainerInstance.objects.get(pk=instance.pk)
            assert row.engine_silent_since is not None, row.status_reason
    row = ContainerInstance.objects.get(pk=instance.pk)
    assert (row.status, row.status_reason, row.engine_silent_since) == ("running", "", None)


@pytest.mark.django_db
def test_the_heartbeat_and_a_ping_find_a_kubernetes_engine_answering_and_a_closed_one_not(
    kube, kube_runtime
):
    """The heartbeat and ``engine_ping`` ask with a bound (``check(timeout=...)``): the
    driver takes it (found by bench/kubernetes.py: without it every ping raised
    TypeError, so the heartbeat marked every Kubernetes runtime unreachable)."""
    from containers.engines.calls import engine_ping
    from containers.execution.heartbeat import _ping
    from containers.models import Runtime
    from tests.engines.kube_harness import closed_port_kubeconfig

    assert _ping(kube_runtime, 5) == ""
    assert engine_ping(runtime=kube_runtime, seconds=5) == (True, "")
    closed = Runtime(
        name="kube-closed",
        driver=Runtime.Driver.KUBERNETES,
        kube_namespace=kube.namespace,
        kube_config=closed_port_kubeconfig(kube),
        kube_context=kube.context,
    )
    reason = _ping(closed, 2)
    assert reason and "TypeError" not in reason, reason
    answered, why = engine_ping(runtime=closed, seconds=2)
    assert not answered and "TypeError" not in why, why


def test_a_kubernetes_start_is_declared_as_not_waiting_for_the_pod_to_run():
    """The monitor looks again at a ``start`` that found the create's worker busy on an
    engine whose start returns before the container runs (``needs_recheck``): without
    that, found by bench/kubernetes.py, a Pod that ran just after the worker's inspect
    left its instance ``creating`` until the next reconcile (30 s)."""
    from containers.engines import driver_class

    assert driver_class("kubernetes").start_runs is False
    assert driver_class("docker").start_runs is True
    assert driver_class("fake").start_runs is True


def test_on_a_real_cluster_the_contract_harness_leaves_the_kubelet_be_and_pulls_its_image(
    kube, monkeypatch
):
    """The contract suite's harness on a real cluster (``KubeCluster.real``, here pointed at
    the emulator): no fake kubelet rule (asking for one would skip the test), the image
    of ``GOBRAVE_TEST_KUBE_IMAGE`` pulled if not present; on the emulator, the local image,
    never pulled."""
    from tests.engines.kube_harness import REAL_IMAGE, harness_for, real_cluster_image
    from tests.engines.test_contract import IMAGE as LOCAL_IMAGE
    from tests.engines.test_contract import Harness
    from tests.kube.fixtures import KubeCluster

    assert real_cluster_image() == REAL_IMAGE == "busybox:1.36"
    emulated = harness_for(kube, Harness).spec()
    assert (emulated.image, emulated.pull_policy) == (LOCAL_IMAGE, "never"), emulated
    monkeypatch.setenv("GOBRAVE_TEST_KUBE_IMAGE", "registry.example/tools/busybox:1.36")
    real = KubeCluster(kube.kubeconfig_path, kube.context, kube.namespace, real=True)
    harness = harness_for(real, Harness)
    made = harness.spec(harness.exit_with(3))
    try:
        harness.run(made, "exit3")
    except pytest.skip.Exception as exc:
        pytest.fail(f"before_start asked for the fake kubelet on a real cluster: {exc}")
    container = raw_pod(kube, made.name)["spec"]["containers"][0]
    assert (container["image"], container["imagePullPolicy"]) == (
        "registry.example/tools/busybox:1.36",
        "IfNotPresent",
    ), container
    assert container["args"] == ["sh", "-c", "exit 3"], container
    harness.cleanup()


@pytest.mark.parametrize(
    ("pull_policy", "image_pull_policy"),
    [("never", "Never"), ("if_not_present", "IfNotPresent"), ("always", "Always")],
)
def test_each_pull_policy_is_the_pods_image_pull_policy(pull_policy, image_pull_policy):
    from containers.engines.kubernetes.pods import pod_manifest
    from containers.models import PullPolicy

    assert set(pods.PULL_POLICIES) == set(PullPolicy.values), pods.PULL_POLICIES
    container = pod_manifest(spec(pull_policy=pull_policy))["spec"]["containers"][0]
    assert container["imagePullPolicy"] == image_pull_policy, container


@pytest.mark.django_db(transaction=True)
def test_a_stop_deletes_the_pod_with_stop_timeout_as_its_grace_period(
    kube, kube_runtime, owner, gobrave_config
):
    """``container.stop_timeout`` is the Pod delete's ``gracePeriodSeconds``: the API
    server's record of the delete (the Pod's ``deletionGracePeriodSeconds``, in the
    watch's history from before the stop) says so."""
    from kubernetes import watch

    from containers.requests.services import container_create_by_template, container_stop
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    gobrave_config(container={"stop_timeout": 7})
    template = TemplateFactory(name="kube-grace", constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"]
    row = _settle(instance, "running")
    with kube.api_client() as api:
        core = client.CoreV1Api(api)
        before = core.list_namespaced_pod(kube.namespace).metadata.resource_version
        container_stop(instance_id=instance.pk, actor="t")
        assert relay_drain() == ["sent"]
        deleting = [
            (event["type"], event["object"].metadata.deletion_grace_period_seconds)
            for event in watch.Watch().stream(
                core.list_namespaced_pod,
                kube.namespace,
                resource_version=before,
                timeout_seconds=1,
                field_selector=f"metadata.name={row.container_name}",
            )
            if event["object"].metadata.deletion_timestamp is not None
        ]
    assert deleting and deleting[0] == ("MODIFIED", 7), deleting
    assert _settle(instance, "stopped").status == "stopped"


def test_a_dollar_in_a_command_or_env_value_reaches_the_container_as_written():
    """Kubernetes expands ``$(VAR)`` and folds ``$$`` in args and env values; Docker does
    not: the Pod carries every ``$`` doubled, which the kubelet turns back into one."""
    from containers.engines.kubernetes.pods import pod_manifest

    made = spec(command=["sh", "-c", "kill $$; echo $(MODE)"], env={"GREETING": "a$(B)c"})
    container = pod_manifest(made)["spec"]["containers"][0]
    assert container["args"] == ["sh", "-c", "kill $$$$; echo $$(MODE)"], container["args"]
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert values["GREETING"] == "a$$(B)c", values


def test_a_stop_of_a_pod_on_a_lost_node_ends_in_a_forced_delete(kube, engine, monkeypatch):
    """A lost node never finishes a graceful delete: past the grace period and its slack
    the Pod is deleted at once, so the stop ends (it would be retried to a dead letter)."""
    from containers.engines.kubernetes import engine as engine_module

    monkeypatch.setattr(engine_module, "GONE_SLACK", 0.5)
    made = spec()
    engine.start(engine.create(made), made)
    wait_status(engine, "gb-pod", {"running"})
    kube.kubelet.lose_node(kube.namespace, "gb-pod")
    wait_status(engine, "gb-pod", {"unknown"})
    engine.stop("gb-pod", 0)
    assert engine.inspect("gb-pod") is None


def test_a_cursor_the_cluster_never_reached_relists_instead_of_ending(kube, engine):
    """A stored cursor made elsewhere (a runtime that was a Docker engine: a nanosecond
    time) is a version the API server has not reached: 504, and the watch lists again
    and goes on from the list's version instead of ending on every reconnect."""
    made = spec("gb-here")
    engine.start(engine.create(made), made)
    wait_status(engine, "gb-here", {"running"})
    foreign = str(time.time_ns())
    events = _drain(engine, foreign, lambda seen: any(e.action == "resync" for e in seen))
    assert events and events[-1].action == "resync", events
    assert events[-1].cursor != foreign and int(events[-1].cursor) < int(foreign)


@pytest.mark.django_db(transaction=True)
def test_a_creates_last_look_keeps_the_node_name_the_monitor_recorded_first(
    kube, kube_runtime, owner
):
    """The monitor may apply the Pod's ``Running`` (and its node) before the create's
    worker looks at what its ``start`` answered (the Pod as made: ``Pending``, no node
    yet): that look says nothing about the node, so it leaves the one recorded."""
    from containers.engines.base import ContainerState
    from containers.execution.handlers import _apply
    from containers.models import ContainerInstance
    from containers.requests.services import container_create_by_template
    from tests.factories import TemplateFactory
    from tests.processes import relay_drain

    template = TemplateFactory(name="kube-node-kept", constraints={"engine": "kube"})
    instance = container_create_by_template(template=template, owner=owner, actor="t")
    assert relay_drain() == ["sent"]
    row = _settle(instance, "running")
    assert row.runtime_node_name, "the reconcile recorded no node"
    made = ContainerState(runtime_id=row.container_id, name=row.container_name, status="created")
    engine = engine_for_cluster(kube)
    assert _apply(row, engine, row.container_id, "creating", made) is True
    after = ContainerInstance.objects.get(pk=instance.pk)
    assert (after.status, after.runtime_node_name) == ("running", row.runtime_node_name)
