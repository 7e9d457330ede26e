"""The Kubernetes emulator and the fake kubelet behave as the API server and a kubelet do,
seen through the official client: what the driver's tests lean on."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client, watch
from urllib3.exceptions import MaxRetryError

from tests.kube import fixtures, rbac
from tests.kube.server import Call

DEADLINE = 10  # seconds: a condition not met by then fails the test, with the Pod printed


@pytest.fixture(scope="module", autouse=True)
def _emulated(kube_cluster) -> None:
    """These tests are of the emulator: on a real cluster they skip (some of what they pin
    down, one BOOKMARK exactly at the timeout, is the emulator's choice, not the API's)."""
    kube_cluster.emulator  # noqa: B018 - skips on a real cluster


@pytest.fixture(scope="module")
def core(kube_cluster) -> Iterator[client.CoreV1Api]:
    with kube_cluster.api_client() as api_client:
        yield client.CoreV1Api(api_client)


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}],
                 "restartPolicy": "Never", **spec},
    }  # fmt: skip


def error_of(call: Callable[[], Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(client.ApiException) as raised:
        call()
    return raised.value.status, json.loads(raised.value.body)


def until(core, kube, name: str, check: Callable[[Any], bool], what: str) -> Any:
    """Wait (on a watch, not a clock) until Pod ``name`` satisfies ``check``."""
    current = core.read_namespaced_pod(name, kube.namespace)
    if check(current):
        return current
    for event in watch.Watch().stream(
        core.list_namespaced_pod, kube.namespace, field_selector=f"metadata.name={name}",
        resource_version=current.metadata.resource_version, timeout_seconds=DEADLINE,
    ):  # fmt: skip
        current = event["object"]
        if check(current):
            return current
    pytest.fail(f"Pod {name} never {what}; it says: {current.status}")


def names(pods) -> list[str]:
    return sorted(p.metadata.name for p in pods.items)


# -- the API ---------------------------------------------------------------------------------


def test_a_dry_run_create_checks_everything_and_stores_nothing(core, kube):
    made = core.create_namespaced_pod(kube.namespace, pod("trial"), dry_run="All")
    assert made.metadata.name == "trial" and made.metadata.resource_version is None
    assert core.list_namespaced_pod(kube.namespace).items == []
    kube.enforce_pod_security("restricted")
    code, _ = error_of(lambda: core.create_namespaced_pod(kube.namespace, pod("t"), dry_run="All"))
    assert code == 403


def test_discovery_and_version_answer_for_a_health_check(core, kube):
    names = {r.name for r in core.get_api_resources().resources}
    assert {"pods", "pods/log", "secrets", "persistentvolumeclaims"} <= names
    assert client.VersionApi(core.api_client).get_code().major == "1"
    with kube.emulator.outage():
        code, _ = error_of(lambda: client.VersionApi(core.api_client).get_code())
    assert code == 503


def test_a_second_create_answers_409_already_exists(core, kube):
    core.create_namespaced_pod(kube.namespace, pod("twice"))
    code, body = error_of(lambda: core.create_namespaced_pod(kube.namespace, pod("twice")))
    assert (code, body["reason"], body["kind"]) == (409, "AlreadyExists", "Status")


def test_a_missing_object_answers_404_not_found(core, kube):
    code, body = error_of(lambda: core.read_namespaced_secret("absent", kube.namespace))
    assert (code, body["reason"]) == (404, "NotFound")


def test_lists_honour_label_and_field_selectors(core, kube):
    core.create_namespaced_pod(kube.namespace, pod("a", {"app": "gb", "tier": "web"}))
    core.create_namespaced_pod(kube.namespace, pod("b", {"app": "gb"}))
    core.create_namespaced_pod(kube.namespace, pod("c", {"app": "other"}))
    ns = kube.namespace
    assert names(core.list_namespaced_pod(ns, label_selector="app=gb")) == ["a", "b"]
    assert names(core.list_namespaced_pod(ns, label_selector="app!=gb")) == ["c"]
    assert names(core.list_namespaced_pod(ns, label_selector="app in (gb, other),tier")) == ["a"]
    assert names(core.list_namespaced_pod(ns, label_selector="app notin (gb)")) == ["c"]
    assert names(core.list_namespaced_pod(ns, label_selector="app,!tier")) == ["b", "c"]
    assert names(core.list_namespaced_pod(ns, field_selector="metadata.name=b")) == ["b"]
    assert names(core.list_namespaced_pod(ns, field_selector="metadata.name!=b")) == ["a", "c"]


def test_a_list_with_a_limit_answers_in_chunks_that_a_continue_token_goes_on_from(core, kube):
    ns = kube.namespace
    for name in ("a", "b", "c", "d", "e"):
        core.create_namespaced_pod(ns, pod(name, {"app": "gb" if name != "c" else "other"}))
    first = core.list_namespaced_pod(ns, label_selector="app=gb", limit=2)
    assert names(first) == ["a", "b"], names(first)
    assert first.metadata.remaining_item_count == 2, first.metadata
    second = core.list_namespaced_pod(
        ns, label_selector="app=gb", limit=2, _continue=first.metadata._continue
    )
    assert names(second) == ["d", "e"], names(second)
    assert second.metadata._continue is None, second.metadata
    assert names(core.list_namespaced_pod(ns)) == ["a", "b", "c", "d", "e"]
    code, body = error_of(lambda: core.list_namespaced_pod(ns, _continue="not-a-token"))
    assert (code, body["reason"]) == (400, "BadRequest"), body


def test_an_unreadable_selector_answers_400(core, kube):
    code, body = error_of(lambda: core.list_namespaced_pod(kube.namespace, label_selector="a in"))
    assert (code, body["reason"]) == (400, "BadRequest")
    code, body = error_of(
        lambda: core.list_namespaced_pod(kube.namespace, field_selector="spec.image=x")
    )
    assert code == 400 and "field label not supported" in body["message"]


def test_patches_merge_labels_annotations_and_status(core, kube):
    ns = kube.namespace
    core.create_namespaced_pod(ns, pod("p", {"keep": "1", "drop": "1"}))
    # A dict body goes as a strategic merge patch (the client's default), then a merge patch.
    core.patch_namespaced_pod(
        "p",
        ns,
        {
            "metadata": {
                "labels": {"drop": None, "new": "2"},
                "annotations": {"gobrave/name": "Full"},
            }
        },
    )
    core.patch_namespaced_pod(
        "p", ns, {"metadata": {"annotations": {"more": "x"}}},
        _content_type="application/merge-patch+json",
    )  # fmt: skip
    core.patch_namespaced_pod_status("p", ns, {"status": {"conditions": [
        {"type": "Custom", "status": "True"}]}})  # fmt: skip
    code, body = error_of(
        lambda: core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"bad": "x" * 64}}})
    )
    assert (code, body["details"]["causes"][0]["field"]) == (422, "metadata.labels")
    got = core.read_namespaced_pod("p", ns)
    assert got.metadata.labels == {"keep": "1", "new": "2"}
    assert got.metadata.annotations == {"gobrave/name": "Full", "more": "x"}
    assert "Custom" in [c.type for c in got.status.conditions or []]


def test_a_change_to_a_pod_s_spec_answers_422_but_its_image_may_change(core, kube):
    ns = kube.namespace
    core.create_namespaced_pod(ns, pod("fixed"))
    code, body = error_of(
        lambda: core.patch_namespaced_pod("fixed", ns, {"spec": {"restartPolicy": "Always"}})
    )
    assert code == 422 and "pod updates may not change fields" in body["message"]
    core.patch_namespaced_pod(
        "fixed", ns, {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    )
    got = core.read_namespaced_pod("fixed", ns)
    assert (got.spec.restart_policy, got.spec.containers[0].image) == ("Never", "busybox:2")


def test_resource_versions_grow_per_object_and_across_the_store(core, kube):
    ns = kube.namespace
    first = core.create_namespaced_secret(ns, {"metadata": {"name": "s1"}})
    second = core.create_namespaced_secret(ns, {"metadata": {"name": "s2"}})
    patched = core.patch_namespaced_secret("s1", ns, {"metadata": {"labels": {"a": "b"}}})
    versions = [int(o.metadata.resource_version) for o in (first, second, patched)]
    assert versions == sorted(set(versions))
    listed = core.list_namespaced_secret(ns)
    assert int(listed.metadata.resource_version) >= versions[-1]


def test_a_secret_s_string_data_is_stored_base64_encoded(core, kube):
    core.create_namespaced_secret(kube.namespace, {"metadata": {"name": "env"},
                                                   "stringData": {"TOKEN": "t0p"}})  # fmt: skip
    got = core.read_namespaced_secret("env", kube.namespace)
    assert base64.b64decode(got.data["TOKEN"]) == b"t0p"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (pod("no-containers") | {"spec": {"containers": []}}, "spec.containers"),
        (pod("Not_DNS"), "metadata.name"),
        (pod("long-label", {"a": "x" * 64}), "metadata.labels"),
        (pod("bad-label", {"a": "-dash"}), "metadata.labels"),
    ],
)
def test_an_invalid_pod_answers_422_with_its_cause(core, kube, body, field):
    code, answer = error_of(lambda: core.create_namespaced_pod(kube.namespace, body))
    assert (code, answer["reason"]) == (422, "Invalid")
    assert field in [cause["field"] for cause in answer["details"]["causes"]]
    assert core.list_namespaced_pod(kube.namespace).items == []


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"metadata": "pod"},
        {"metadata": {"name": "p", "namespace": "elsewhere"}, "spec": pod("p")["spec"]},
        {"metadata": {"name": "p"}, "spec": {"containers": "main"}},
        {"metadata": {"name": "p", "labels": ["a"]}, "spec": pod("p")["spec"]},
    ],
)
def test_a_body_of_the_wrong_shape_answers_400_and_stores_nothing(core, kube, body):
    # Sent raw: the client's own models would refuse most of these before sending.
    api = core.api_client
    method, url, headers, data, _ = api.param_serialize(
        "POST", f"/api/v1/namespaces/{kube.namespace}/pods", body=body,
        header_params={"Content-Type": "application/json"}, auth_settings=["BearerToken"],
    )  # fmt: skip
    response = api.call_api(method, url, headers, data)
    answer = json.loads(response.read())
    assert (response.status, answer["reason"]) == (400, "BadRequest"), answer
    assert core.list_namespaced_pod(kube.namespace).items == []


def test_a_container_without_an_image_answers_422(core, kube):
    body = pod("no-image")
    body["spec"]["containers"][0]["image"] = " "
    code, answer = error_of(lambda: core.create_namespaced_pod(kube.namespace, body))
    assert code == 422 and answer["details"]["causes"][0]["field"] == "spec.containers[0].image"


def test_a_quota_refuses_a_pod_past_it_with_403_exceeded_quota(core, kube):
    kube.emulator.set_quota(kube.namespace, {"pods": 1})
    core.create_namespaced_pod(kube.namespace, pod("first"))
    code, body = error_of(lambda: core.create_namespaced_pod(kube.namespace, pod("second")))
    assert (code, body["reason"]) == (403, "Forbidden")
    assert "exceeded quota: quota" in body["message"], body["message"]
    assert names(core.list_namespaced_pod(kube.namespace)) == ["first"]


def test_a_cpu_quota_refuses_a_pod_over_it_and_one_without_requests(core, kube):
    kube.emulator.set_quota(kube.namespace, {"requests.cpu": "500m"})
    big = pod("big")
    big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "600m"}}
    code, body = error_of(lambda: core.create_namespaced_pod(kube.namespace, big))
    assert code == 403 and "requested: requests.cpu=600m" in body["message"], body["message"]
    code, body = error_of(lambda: core.create_namespaced_pod(kube.namespace, pod("bare")))
    assert code == 403 and "must specify requests.cpu" in body["message"], body["message"]


HARDENED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def test_a_restricted_namespace_refuses_a_pod_that_breaks_the_profile_with_403(core, kube):
    kube.enforce_pod_security("restricted")
    code, body = error_of(lambda: core.create_namespaced_pod(kube.namespace, pod("loose")))
    assert (code, body["reason"]) == (403, "Forbidden")
    assert 'violates PodSecurity "restricted:latest"' in body["message"]
    for reason in ("allowPrivilegeEscalation != false", "unrestricted capabilities",
                   "runAsNonRoot != true", "seccompProfile"):  # fmt: skip
        assert reason in body["message"], body["message"]
    assert core.list_namespaced_pod(kube.namespace).items == []


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({}, None),
        ({"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}, '"SYS_ADMIN"'),
        ({"runAsUser": 0}, "runAsUser=0"),
        ({"privileged": True}, "privileged"),
    ],
)
def test_a_restricted_namespace_admits_only_a_hardened_pod(core, kube, change, refused):
    kube.enforce_pod_security("restricted")
    body = pod("hard")
    body["spec"]["containers"][0]["securityContext"] = HARDENED | change
    if refused is None:
        core.create_namespaced_pod(kube.namespace, body)
        return
    code, answer = error_of(lambda: core.create_namespaced_pod(kube.namespace, body))
    assert code == 403 and refused in answer["message"], answer["message"]


def test_a_restricted_namespace_refuses_a_host_path_volume(core, kube):
    kube.enforce_pod_security("restricted")
    body = pod("host")
    body["spec"]["containers"][0]["securityContext"] = HARDENED
    body["spec"]["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    code, answer = error_of(lambda: core.create_namespaced_pod(kube.namespace, body))
    assert code == 403 and 'hostPath volumes (volume "root")' in answer["message"]


# -- watches ---------------------------------------------------------------------------------


def events(core, kube, since: str, **kwargs: Any) -> list[tuple[str, str]]:
    """The Secret events after ``since``, read up to the creation of an end marker (a
    Secret ``end-N`` made here, with the labels ``end_labels``), so that no test waits out
    a timeout; the markers (this one and earlier ones) are left out of the answer."""
    labels = kwargs.pop("end_labels", {})
    end = core.create_namespaced_secret(
        kube.namespace, {"metadata": {"generateName": "end-", "labels": labels}}
    ).metadata.name
    got = []
    for event in watch.Watch().stream(core.list_namespaced_secret, kube.namespace,
                                      resource_version=since, timeout_seconds=DEADLINE,
                                      **kwargs):  # fmt: skip
        name = event["raw_object"]["metadata"].get("name", "")
        if name == end:
            return got
        if not name.startswith("end-"):
            got.append((event["type"], name))
    pytest.fail(f"the watch ended before {end} was added: {got}")


def test_a_watch_resumes_from_its_version_with_every_change_in_order(core, kube):
    ns = kube.namespace
    start = core.list_namespaced_secret(ns).metadata.resource_version
    core.create_namespaced_secret(ns, {"metadata": {"name": "x"}})
    core.patch_namespaced_secret("x", ns, {"metadata": {"labels": {"a": "b"}}})
    middle = core.create_namespaced_secret(ns, {"metadata": {"name": "y"}}).metadata
    core.delete_namespaced_secret("x", ns)
    assert events(core, kube, start) == [
        ("ADDED", "x"), ("MODIFIED", "x"), ("ADDED", "y"), ("DELETED", "x")
    ]  # fmt: skip
    assert events(core, kube, middle.resource_version) == [("DELETED", "x")]


def test_a_watch_with_a_selector_sees_objects_enter_and_leave_it(core, kube):
    ns = kube.namespace
    start = core.list_namespaced_secret(ns).metadata.resource_version
    core.create_namespaced_secret(ns, {"metadata": {"name": "s"}})
    core.patch_namespaced_secret("s", ns, {"metadata": {"labels": {"app": "gb"}}})
    core.patch_namespaced_secret("s", ns, {"metadata": {"labels": {"app": None}}})
    assert events(core, kube, start, label_selector="app=gb", end_labels={"app": "gb"}) == [
        ("ADDED", "s"), ("DELETED", "s")
    ]  # fmt: skip


def test_a_watch_from_before_the_history_gets_410_and_a_relist_resumes(core, kube):
    ns = kube.namespace
    kube.emulator.set_history_limit(5)  # room for the relist's two changes, and slack
    old = core.create_namespaced_secret(ns, {"metadata": {"name": "a"}}).metadata
    for name in "bcdefgh":
        core.create_namespaced_secret(ns, {"metadata": {"name": name}})
    with pytest.raises(client.ApiException) as raised:
        events(core, kube, old.resource_version)
    assert raised.value.status == 410
    relisted = core.list_namespaced_secret(ns)
    assert [n for n in names(relisted) if not n.startswith("end-")] == list("abcdefgh")
    core.create_namespaced_secret(ns, {"metadata": {"name": "i"}})
    assert events(core, kube, relisted.metadata.resource_version) == [("ADDED", "i")]


def test_a_watch_ends_at_its_timeout_with_a_bookmark_when_allowed(core, kube):
    ns = kube.namespace
    now = core.list_namespaced_secret(ns).metadata.resource_version
    got = list(watch.Watch().stream(core.list_namespaced_secret, ns, resource_version=now,
                                    timeout_seconds=1, allow_watch_bookmarks=True))  # fmt: skip
    assert [e["type"] for e in got] == ["BOOKMARK"]
    assert got[0]["raw_object"]["metadata"]["resourceVersion"] == now


def test_a_watch_without_a_version_starts_with_what_exists(core, kube):
    # Listed in name order (as etcd's keys are), so "alpha" comes before the end marker.
    core.create_namespaced_secret(kube.namespace, {"metadata": {"name": "alpha"}})
    core.patch_namespaced_secret("alpha", kube.namespace, {"metadata": {"labels": {"a": "b"}}})
    assert events(core, kube, "") == [("ADDED", "alpha")]


def test_a_dropped_watch_ends_and_resumes_from_its_last_version(core, kube):
    ns = kube.namespace
    start = core.list_namespaced_secret(ns).metadata.resource_version
    core.create_namespaced_secret(ns, {"metadata": {"name": "before"}})
    stream = watch.Watch().stream(core.list_namespaced_secret, ns, resource_version=start,
                                  timeout_seconds=DEADLINE)  # fmt: skip
    first = next(stream)
    kube.emulator.drop_watches()
    assert list(stream) == []  # ended early, with nothing more
    core.create_namespaced_secret(ns, {"metadata": {"name": "after"}})
    last = first["raw_object"]["metadata"]["resourceVersion"]
    assert events(core, kube, last) == [("ADDED", "after")]


def test_an_outage_answers_503_and_changes_nothing(core, kube):
    with kube.emulator.outage():
        code, body = error_of(
            lambda: core.create_namespaced_secret(kube.namespace, {"metadata": {"name": "x"}})
        )
    assert (code, body["reason"]) == (503, "ServiceUnavailable")
    assert core.list_namespaced_secret(kube.namespace).items == []


# -- the fake kubelet ------------------------------------------------------------------------


def test_a_pod_runs_on_the_node_until_deleted_with_a_grace_period(core, kube):
    kube.kubelet  # noqa: B018 - the fake kubelet's behaviour (skips on a real cluster)
    core.create_namespaced_pod(kube.namespace, pod("runner"))
    running = until(core, kube, "runner", lambda p: p.status.phase == "Running", "ran")
    assert running.spec.node_name and running.status.pod_ip and running.status.start_time
    state = running.status.container_statuses[0]
    assert state.ready and state.state.running.started_at
    marked = core.delete_namespaced_pod("runner", kube.namespace, grace_period_seconds=5)
    assert marked.metadata.deletion_timestamp is not None  # it lingers until the kubelet ends it
    seen = []
    for event in watch.Watch().stream(core.list_namespaced_pod, kube.namespace,
                                      field_selector="metadata.name=runner",
                                      resource_version=running.metadata.resource_version,
                                      timeout_seconds=DEADLINE):  # fmt: skip
        seen.append(event["type"])
        if event["type"] == "DELETED":
            break
    assert seen[-1:] == ["DELETED"], seen
    assert core.list_namespaced_pod(kube.namespace).items == []


@pytest.mark.parametrize(
    ("rule", "phase", "code", "reason"),
    [
        ({"exit_code": 0, "after_ms": 20}, "Succeeded", 0, "Completed"),
        ({"exit_code": 3, "after_ms": 20}, "Failed", 3, "Error"),
        ({"oom": True}, "Failed", 137, "OOMKilled"),
    ],
)
def test_a_rule_ends_the_pod_as_the_kubelet_reports_it(core, kube, rule, phase, code, reason):
    kube.kubelet.add_rule(labels={"job": "x"}, **rule)
    core.create_namespaced_pod(kube.namespace, pod("ends", {"job": "x"}))
    done = until(core, kube, "ends", lambda p: p.status.phase == phase, f"reached {phase}")
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (code, reason)


def test_an_outcome_on_trigger_waits_for_it(core, kube):
    kube.kubelet.add_rule(name="held", exit_code=0, on_trigger=True)
    core.create_namespaced_pod(kube.namespace, pod("held"))
    until(core, kube, "held", lambda p: p.status.phase == "Running", "ran")
    assert core.read_namespaced_pod("held", kube.namespace).status.phase == "Running"
    kube.kubelet.trigger(kube.namespace, "held")
    until(core, kube, "held", lambda p: p.status.phase == "Succeeded", "succeeded")


def test_a_pulling_pod_waits_in_container_creating_until_triggered(core, kube):
    kube.kubelet.add_rule(name="slow", pulling=True)
    core.create_namespaced_pod(kube.namespace, pod("slow"))

    def creating(p) -> bool:
        states = p.status.container_statuses or []
        return bool(states) and states[0].state.waiting is not None

    until(core, kube, "slow", creating, "waited for its image")
    # A Pod made after it runs: the kubelet has stepped past "slow"'s last change.
    core.create_namespaced_pod(kube.namespace, pod("quick"))
    until(core, kube, "quick", lambda p: p.status.phase == "Running", "ran")
    held = core.read_namespaced_pod("slow", kube.namespace)
    assert held.spec.node_name and held.status.phase == "Pending", held.status
    assert held.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    kube.kubelet.trigger(kube.namespace, "slow")
    until(core, kube, "slow", lambda p: p.status.phase == "Running", "ran")


def test_an_unschedulable_pod_stays_pending_with_the_reason(core, kube):
    kube.kubelet.add_rule(name="big", unschedulable="0/1 nodes are available: 1 Insufficient cpu.")
    core.create_namespaced_pod(kube.namespace, pod("big"))
    waiting = until(core, kube, "big", lambda p: bool(p.status.conditions), "got a condition")
    (condition,) = waiting.status.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "PodScheduled", "False", "Unschedulable"
    )  # fmt: skip
    assert "Insufficient cpu" in condition.message
    assert waiting.status.phase == "Pending" and not waiting.spec.node_name


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])
def test_an_image_error_leaves_the_container_waiting_with_the_reason(core, kube, reason):
    kube.kubelet.add_rule(name="img", image_error=reason)
    core.create_namespaced_pod(kube.namespace, pod("img"))

    def waiting(p) -> bool:
        states = p.status.container_statuses or []
        return (
            bool(states)
            and (states[0].state.waiting or client.V1ContainerStateWaiting()).reason == reason
        )

    got = until(core, kube, "img", waiting, f"waited with {reason}")
    assert got.status.phase == "Pending" and got.status.container_statuses[0].state.waiting.message


def test_an_unparseable_image_is_invalid_image_name_without_a_rule(core, kube):
    kube.kubelet  # noqa: B018
    body = pod("upper")
    body["spec"]["containers"][0]["image"] = "Busybox:1"
    core.create_namespaced_pod(kube.namespace, body)

    def invalid(p) -> bool:
        states = p.status.container_statuses or []
        return (
            bool(states)
            and bool(states[0].state.waiting)
            and states[0].state.waiting.reason == "InvalidImageName"
        )

    until(core, kube, "upper", invalid, "was InvalidImageName")


def test_a_lost_node_makes_the_pod_unknown_and_it_lingers_until_forced(core, kube):
    kube.kubelet.add_rule(name="lost", node_lost=True, after_ms=10)
    core.create_namespaced_pod(kube.namespace, pod("lost"))
    got = until(core, kube, "lost", lambda p: p.status.phase == "Unknown", "became Unknown")
    ready = next(c for c in got.status.conditions if c.type == "Ready")
    assert (ready.status, got.status.reason) == ("Unknown", "NodeLost")
    code, body = error_of(lambda: core.read_namespaced_pod_log("lost", kube.namespace))
    assert code == 500 and "10250" in body["message"]  # the API server cannot reach the node
    core.delete_namespaced_pod("lost", kube.namespace, grace_period_seconds=30)
    marked = core.read_namespaced_pod("lost", kube.namespace)
    assert marked.metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("lost", kube.namespace, grace_period_seconds=0)
    assert core.list_namespaced_pod(kube.namespace).items == []


def test_a_delete_of_a_pod_not_yet_on_a_node_is_immediate(core, kube):
    kube.kubelet.add_rule(name="nowhere", unschedulable="0/1 nodes are available.")
    core.create_namespaced_pod(kube.namespace, pod("nowhere"))
    core.delete_namespaced_pod("nowhere", kube.namespace, grace_period_seconds=30)
    assert core.list_namespaced_pod(kube.namespace).items == []


def test_a_pod_waits_for_a_node_its_node_selector_matches(core, kube):
    kube.kubelet  # noqa: B018
    core.create_namespaced_pod(kube.namespace, pod("picky", nodeSelector={"disktype": "ssd"}))
    waiting = until(core, kube, "picky", lambda p: bool(p.status.conditions), "waited")
    assert "didn't match Pod's node affinity/selector" in waiting.status.conditions[0].message
    kube.kubelet.set_node_labels(disktype="ssd")
    until(core, kube, "picky", lambda p: p.status.phase == "Running", "ran")


def test_a_pod_waits_for_its_claim_which_is_bound_when_it_is_scheduled(core, kube):
    kube.kubelet  # noqa: B018
    ns = kube.namespace
    body = pod("mounts")
    body["spec"]["volumes"] = [{"name": "w", "persistentVolumeClaim": {"claimName": "work"}}]
    core.create_namespaced_pod(ns, body)
    waiting = until(core, kube, "mounts", lambda p: bool(p.status.conditions), "waited")
    assert 'persistentvolumeclaim "work" not found' in waiting.status.conditions[0].message
    core.create_namespaced_persistent_volume_claim(ns, {
        "metadata": {"name": "work"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    until(core, kube, "mounts", lambda p: p.status.phase == "Running", "ran")
    claim = core.read_namespaced_persistent_volume_claim("work", ns)
    assert (claim.status.phase, claim.status.capacity) == ("Bound", {"storage": "1Gi"})


def test_a_container_waits_for_the_secret_its_env_refers_to(core, kube):
    kube.kubelet  # noqa: B018
    ns = kube.namespace
    body = pod("needs")
    body["spec"]["containers"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "env", "key": "TOKEN"}}}
    ]
    core.create_namespaced_pod(ns, body)

    def config_error(p) -> bool:
        states = p.status.container_statuses or []
        waiting = states[0].state.waiting if states else None
        return bool(waiting) and waiting.reason == "CreateContainerConfigError"

    got = until(core, kube, "needs", config_error, "waited for its Secret")
    assert got.status.container_statuses[0].state.waiting.message == 'secret "env" not found'
    core.create_namespaced_secret(ns, {"metadata": {"name": "env"}, "stringData": {"TOKEN": "x"}})
    until(core, kube, "needs", lambda p: p.status.phase == "Running", "ran")


def test_the_scheduler_and_the_kubelet_write_events_about_the_pod(core, kube):
    kube.kubelet.add_rule(name="told", exit_code=0)
    core.create_namespaced_pod(kube.namespace, pod("told"))
    until(core, kube, "told", lambda p: p.status.phase == "Succeeded", "succeeded")
    found = core.list_namespaced_event(kube.namespace, field_selector="involvedObject.name=told")
    written = sorted(found.items, key=lambda e: int(e.metadata.resource_version))
    assert [e.reason for e in written] == ["Scheduled", "Started"]
    assert written[0].source.component == "default-scheduler"


# -- logs ------------------------------------------------------------------------------------


def test_logs_answer_tail_lines_and_timestamps(core, kube):
    kube.kubelet.add_rule(name="talk", logs=["one", "two", "three"])
    core.create_namespaced_pod(kube.namespace, pod("talk"))
    until(core, kube, "talk", lambda p: p.status.phase == "Running", "ran")
    ns = kube.namespace
    assert core.read_namespaced_pod_log("talk", ns) == "one\ntwo\nthree\n"
    assert core.read_namespaced_pod_log("talk", ns, tail_lines=2) == "two\nthree\n"
    stamped = core.read_namespaced_pod_log("talk", ns, tail_lines=1, timestamps=True)
    assert stamped.endswith("Z three\n") and stamped[:4].isdigit(), stamped
    assert core.read_namespaced_pod_log("talk", ns, since_seconds=3600).count("\n") == 3


def test_logs_since_seconds_leave_older_lines_out(core, kube):
    kube.kubelet.add_rule(name="old")
    core.create_namespaced_pod(kube.namespace, pod("old"))
    until(core, kube, "old", lambda p: p.status.phase == "Running", "ran")
    long_ago = datetime.now(UTC) - timedelta(hours=2)
    kube.kubelet.write_log(kube.namespace, "old", "stale", at=long_ago)
    kube.kubelet.write_log(kube.namespace, "old", "fresh")
    assert core.read_namespaced_pod_log("old", kube.namespace, since_seconds=3600) == "fresh\n"
    assert core.read_namespaced_pod_log("old", kube.namespace, limit_bytes=3) == "sta"


def test_logs_of_a_container_still_waiting_answer_400(core, kube):
    kube.kubelet.add_rule(name="slow", image_error="ErrImagePull")
    core.create_namespaced_pod(kube.namespace, pod("slow"))
    code, body = error_of(lambda: core.read_namespaced_pod_log("slow", kube.namespace))
    assert code == 400 and "is waiting to start" in body["message"]


def test_followed_logs_stream_new_lines_until_the_container_ends(core, kube):
    kube.kubelet.add_rule(name="follow", logs=["before"])
    core.create_namespaced_pod(kube.namespace, pod("follow"))
    until(core, kube, "follow", lambda p: p.status.phase == "Running", "ran")
    response = core.read_namespaced_pod_log(
        "follow", kube.namespace, follow=True, _preload_content=False
    )
    lines: list[str] = []
    first = threading.Event()

    def read() -> None:
        for line in response.stream(amt=None, decode_content=True):
            lines.extend(line.decode().splitlines())
            first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first.wait(DEADLINE), "the followed log sent nothing"
    kube.kubelet.write_log(kube.namespace, "follow", "after\nlast")
    kube.kubelet.finish(kube.namespace, "follow", 0)
    reader.join(DEADLINE)
    assert not reader.is_alive(), f"the stream did not end with the container: {lines}"
    assert lines == ["before", "after", "last"]


# -- what the test reads back ----------------------------------------------------------------


def test_every_request_is_recorded_as_rbac_sees_it(core, kube):
    kube.kubelet.add_rule(name="rec", logs=["x"])
    core.create_namespaced_pod(kube.namespace, pod("rec"))
    until(core, kube, "rec", lambda p: p.status.phase == "Running", "ran")
    core.read_namespaced_pod_log("rec", kube.namespace)
    core.list_namespaced_pod(kube.namespace, label_selector="app")
    core.delete_namespaced_pod("rec", kube.namespace, grace_period_seconds=0)
    calls = set(kube.emulator.calls)
    assert kube.emulator.busy_seconds > 0 and kube.kubelet.busy_seconds > 0
    ns = kube.namespace
    assert {
        Call("create", "pods", "", ns), Call("get", "pods", "", ns),
        Call("list", "pods", "", ns), Call("get", "pods", "log", ns),
        Call("delete", "pods", "", ns),
    } <= calls, calls  # fmt: skip


def test_a_role_covers_the_calls_its_rules_grant_and_no_other(core, kube):
    kube.kubelet.add_rule(name="ruled", logs=["x"])
    ns = kube.namespace
    core.create_namespaced_pod(ns, pod("ruled"))
    until(core, kube, "ruled", lambda p: p.status.phase == "Running", "ran")
    core.read_namespaced_pod_log("ruled", ns)
    core.list_namespace()  # cluster-wide: no Role grants it
    role = {
        "kind": "Role",
        "metadata": {"name": "gobrave", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["create", "get", "list", "watch"]}],
    }  # fmt: skip
    assert rbac.uncovered(kube.emulator.calls, role) == [
        Call("list", "namespaces", "", ""), Call("get", "pods", "log", ns),
    ]  # fmt: skip
    role["rules"].append({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]})
    assert rbac.uncovered(kube.emulator.calls, role) == [Call("list", "namespaces", "", "")]
    role["metadata"]["namespace"] = "elsewhere"
    assert Call("create", "pods", "", ns) in rbac.uncovered(kube.emulator.calls, role)


def test_a_wrong_token_answers_401(kube):
    configuration = client.Configuration()
    configuration.host = kube.emulator.url
    configuration.ssl_ca_cert = kube.emulator.ca_path
    configuration.api_key = {"authorization": "Bearer wrong"}
    with client.ApiClient(configuration) as api_client:
        code, body = error_of(lambda: client.CoreV1Api(api_client).list_namespaced_pod("x"))
    assert (code, body["reason"]) == (401, "Unauthorized")
    assert kube.emulator.calls == []


def test_the_client_refuses_a_server_it_cannot_verify(kube):
    configuration = client.Configuration()
    configuration.host = kube.emulator.url  # no CA given: the system's, which never signed it
    configuration.retries = False
    # The client raises its ApiException (status 0) or urllib3's error, as the retry goes.
    with (
        client.ApiClient(configuration) as api_client,
        pytest.raises((client.ApiException, MaxRetryError)) as raised,
    ):
        client.CoreV1Api(api_client).list_namespaced_pod("x")
    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)
    assert kube.emulator.calls == []


def test_a_reset_forgets_objects_calls_and_every_version_before_it(core, kube_cluster):
    kube_cluster.reset()
    made = core.create_namespaced_secret(kube_cluster.namespace, {"metadata": {"name": "gone"}})
    kube_cluster.kubelet.add_rule(name="any", exit_code=1)
    kube_cluster.enforce_pod_security("restricted")
    kube_cluster.reset()
    assert kube_cluster.emulator.calls == []
    assert core.list_namespaced_secret(kube_cluster.namespace).items == []
    core.create_namespaced_pod(kube_cluster.namespace, pod("any"))  # no Pod Security any more
    until(core, kube_cluster, "any", lambda p: p.status.phase == "Running", "ran (no rule)")
    with pytest.raises(client.ApiException) as raised:
        list(watch.Watch().stream(core.list_namespaced_secret, kube_cluster.namespace,
                                  resource_version=made.metadata.resource_version,
                                  timeout_seconds=DEADLINE))  # fmt: skip
    assert raised.value.status == 410


def test_the_real_cluster_variant_makes_empties_and_deletes_its_own_namespace(
    core, kube, monkeypatch
):
    # The emulator stands in for the real cluster: this checks the variant's own steps.
    monkeypatch.setenv("KUBECONFIG", kube.kubeconfig_path)
    variant = fixtures._real_cluster()
    real = next(variant)
    assert real.real and real.namespace.startswith("gobrave-test-")
    with pytest.raises(pytest.skip.Exception):
        real.kubelet  # noqa: B018
    with pytest.raises(pytest.skip.Exception):
        real.emulator  # noqa: B018
    core.create_namespaced_secret(real.namespace, {"metadata": {"name": "left"}})
    real.enforce_pod_security("restricted")
    real.reset()
    assert core.list_namespaced_secret(real.namespace).items == []
    assert not core.read_namespace(real.namespace).metadata.labels
    next(variant, None)  # its teardown
    assert real.namespace not in names(core.list_namespace())


def test_pod_metrics_report_the_rule_s_usage(core, kube):
    kube.kubelet.add_rule(name="busy", usage={"cpu": "250m", "memory": "64Mi"})
    core.create_namespaced_pod(kube.namespace, pod("busy"))
    until(core, kube, "busy", lambda p: p.status.phase == "Running", "ran")
    metrics = client.CustomObjectsApi(core.api_client).get_namespaced_custom_object(
        "metrics.k8s.io", "v1beta1", kube.namespace, "pods", "busy"
    )
    assert metrics["containers"] == [{"name": "main", "usage": {"cpu": "250m", "memory": "64Mi"}}]
