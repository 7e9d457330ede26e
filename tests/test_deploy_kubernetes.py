"""``deploy/kubernetes/``: every manifest is valid Kubernetes, runs what the Procfile runs,
is probed by endpoints and commands that exist, and grants and exposes no more than
docs/kubernetes.md says.

Validation is offline: kubernetes-validate bundles the API's JSON schemas (checked in a
network namespace of its own below). ``kubectl kustomize`` builds the example overlay
where kubectl is installed; everywhere, the kustomization files are read and every file
they list must exist.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from containers.engines.labels import LABEL_INSTANCE
from core import probes
from core.config import load_config
from outbox.management.commands.health import Command as HealthCommand
from tests.processes import REPO

KUBE = REPO / "deploy" / "kubernetes"
BASE = KUBE / "base"
OVERLAY = KUBE / "overlays" / "example"
# What a runtime namespace other than gobrave's needs, and the overlay that shows its use.
RUNTIME_NAMESPACE = KUBE / "components" / "runtime-namespace"
RUNTIME_OVERLAY = KUBE / "overlays" / "example-runtime-namespace"
VERSIONS = ["1.29", "1.37"]  # the oldest Kubernetes the manifests promise, and the newest
KUSTOMIZATION = "kustomization.yaml"
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


def _manifest_files() -> list[Path]:
    return sorted(
        path
        for path in KUBE.rglob("*.yaml")
        if path.name != KUSTOMIZATION and path.suffix == ".yaml"
    )


def _documents(paths: list[Path] | None = None) -> list[dict]:
    return [
        doc
        for path in paths or _manifest_files()
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def _by_kind(kind: str) -> list[dict]:
    return [doc for doc in _documents() if doc["kind"] == kind]


def _pod_specs() -> list[tuple[str, dict]]:
    """(name, Pod spec) of every workload: the Deployments and the migration Job."""
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for doc in _documents()
        if doc["kind"] in ("Deployment", "Job")
    ]


def _containers(spec: dict) -> list[dict]:
    return spec.get("initContainers", []) + spec["containers"]


def _kubectl_build(overlay: Path = OVERLAY) -> list[dict] | None:
    """``overlay`` (the example) as ``kubectl kustomize`` builds it; None without kubectl."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    done = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def built() -> list[dict] | None:
    return _kubectl_build()


# --- valid Kubernetes, and a kustomize layout that builds -------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_strictly_against_the_kubernetes_schemas(version, built):
    docs = built or _documents()  # the overlay's build holds every manifest of the base
    assert {doc["kind"] for doc in docs} >= {
        "Deployment", "Service", "Job", "ServiceAccount", "Role", "RoleBinding",
        "NetworkPolicy", "Namespace",
    }  # fmt: skip
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_refuses_a_misspelt_field():
    """The check above could fail: strict validation refuses a field the API lacks."""
    doc = _by_kind("Deployment")[0]
    broken = {**doc, "spec": {**doc["spec"], "replicsa": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


VALIDATE_OFFLINE = """
import sys, yaml, kubernetes_validate
version, *paths = sys.argv[1:]
for path in paths:
    for doc in yaml.safe_load_all(open(path)):
        kubernetes_validate.validate(doc, version, strict=True)
print("valid")
"""


def test_validation_needs_no_network():
    """In a network namespace of its own (no interface but a down loopback)."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--net", "true"]).returncode != 0:
        pytest.skip("no network namespace can be made here (needs unshare and root)")
    done = subprocess.run(
        [unshare, "--net", sys.executable, "-c", VALIDATE_OFFLINE, VERSIONS[-1],
         *map(str, _manifest_files())],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (0, "valid"), done.stderr


def _listed(kustomization: Path) -> list[Path]:
    spec = yaml.safe_load(kustomization.read_text())
    files = list(spec.get("resources", [])) + list(spec.get("components", []))
    for generator in spec.get("configMapGenerator", []) + spec.get("secretGenerator", []):
        files += [entry.split("=", 1)[-1] for entry in generator.get("files", [])]
    return [(kustomization.parent / name).resolve() for name in files]


@pytest.mark.parametrize(
    "directory",
    [BASE, OVERLAY, RUNTIME_NAMESPACE, RUNTIME_OVERLAY],
    ids=["base", "example-overlay", "runtime-namespace", "example-runtime-namespace"],
)
def test_a_kustomization_lists_files_that_exist_and_every_manifest_beside_it(directory):
    listed = _listed(directory / KUSTOMIZATION)
    for path in listed:
        assert path.is_file() or (path / KUSTOMIZATION).is_file(), path
    beside = {path.resolve() for path in directory.glob("*.yaml") if path.name != KUSTOMIZATION}
    assert beside - set(listed) == set()


def test_kubectl_kustomize_builds_the_example_overlay_into_one_namespace(built):
    if built is None:
        pytest.skip("kubectl is not installed (the kustomization files are checked above)")
    namespaced = [doc for doc in built if doc["kind"] != "Namespace"]
    assert {doc["metadata"]["namespace"] for doc in namespaced} == {"gobrave"}
    config = next(doc for doc in built if doc["kind"] == "ConfigMap")
    assert config["data"]["config.yml"] == (OVERLAY / "config.yml").read_text()
    for doc in built:
        if doc["kind"] in ("Deployment", "Job"):
            for container in _containers(doc["spec"]["template"]["spec"]):
                assert container["image"] == "registry.example.org/gobrave:0.1.0"


def _config(path: Path) -> dict:
    config = load_config(path, environ={})
    config["container"].pop("workspace_root")  # relative to the file's directory
    return config


def test_the_base_config_is_the_shipped_one_and_the_overlays_loads():
    """The base's config.yml sets nothing: gobrave's defaults are the shipped file's."""
    assert _config(BASE / "config.yml") == _config(REPO / "config.yml")
    config = load_config(OVERLAY / "config.yml", environ={})
    assert config["queue"]["broker"] == "orm"  # the clusters' probes need its marks


# --- the same processes as the Procfile and systemd ---------------------------------------


def _procfile() -> dict[str, list[str]]:
    lines = (REPO / "deploy" / "Procfile").read_text().splitlines()
    entries = (line.split(":", 1) for line in lines if line and not line.startswith("#"))
    return {name: shlex.split(command) for name, command in entries}


def _main_container(name: str) -> dict:
    deployment = next(doc for doc in _by_kind("Deployment") if doc["metadata"]["name"] == name)
    return deployment["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("deployment", "part"),
    [
        ("gobrave-dispatcher", "dispatcher"),
        ("gobrave-monitor", "monitor"),
        ("gobrave-cluster-create", "create"),
        ("gobrave-cluster-control", "control"),
    ],
)
def test_each_deployment_runs_the_procfiles_command(deployment, part):
    assert _main_container(deployment)["command"] == _procfile()[part]


def _without_bind(argv: list[str]) -> list[str]:
    at = argv.index("--bind")
    return argv[:at] + argv[at + 2 :]


def test_the_web_runs_the_systemd_units_gunicorn_and_binds_the_pods_address():
    unit = (REPO / "deploy" / "systemd" / "gobrave-web.service").read_text()
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(line.split("=", 1)[1])
    expected = ["python", *argv[1:]]  # the venv's python is the image's
    command = _main_container("gobrave-web")["command"]
    assert _without_bind(command) == _without_bind(expected)
    assert command[command.index("--bind") + 1] == "0.0.0.0:8000"
    web = _procfile()["web"]
    assert web[web.index("--worker-class") + 1] in command  # the Procfile's server too


def test_the_image_runs_as_the_user_the_manifests_name_from_the_checkout():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "USER 10001:10001" in dockerfile and "WORKDIR /app" in dockerfile
    for name, spec in _pod_specs():
        assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (
            10001,
            10001,
        ), name
        for container in _containers(spec):
            mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
            assert {"/app/var", "/tmp", "/etc/gobrave"} <= mounts, (name, container["name"])


# --- probes -------------------------------------------------------------------------------

# The process each ``manage.py health`` argument checks, as the Procfile starts it.
HEALTH_OF = {
    ("dispatcher",): ["python", "manage.py", "run_dispatcher"],
    ("monitor",): ["python", "manage.py", "run_monitor"],
    ("cluster", "create"): ["python", "manage.py", "run_cluster", "create"],
    ("cluster", "control"): ["python", "manage.py", "run_cluster", "control"],
    ("cluster", "webhooks"): ["python", "manage.py", "run_cluster", "webhooks"],
}


def _health_argv(probe: dict, kind: str) -> tuple[str, ...]:
    """What a probe's ``manage.py health`` checks. Startup and liveness pass while the
    database does not answer (an outage restarts nothing); readiness does not."""
    command = probe["exec"]["command"]
    assert command[:3] == ["python", "manage.py", "health"], command
    parsed = HealthCommand().create_parser("manage.py", "health").parse_args(command[3:])
    assert parsed.ok_if_database_down is (kind != "readinessProbe"), (kind, command)
    return tuple(arg for arg in (parsed.process, parsed.queue) if arg)


@pytest.mark.parametrize("deployment", [doc["metadata"]["name"] for doc in _by_kind("Deployment")])
def test_every_deployment_is_probed_by_a_real_endpoint_or_its_own_health_check(deployment):
    container = _main_container(deployment)
    assert set(PROBES) <= set(container), f"{deployment} lacks a probe"
    for kind in PROBES:
        probe = container[kind]
        if "httpGet" in probe:
            assert probe["httpGet"]["path"] in probes.PROBES
            port = probe["httpGet"]["port"]
            assert port in {p["name"] for p in container["ports"]}
        else:
            assert HEALTH_OF[_health_argv(probe, kind)] == container["command"], (deployment, kind)
    if "httpGet" in container["readinessProbe"]:  # the web: ready means the database is
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.parametrize("unit", ["dispatcher", "monitor", "cluster@"])
def test_the_systemd_units_check_at_start_that_their_process_beats(unit):
    text = (REPO / "deploy" / "systemd" / f"gobrave-{unit}.service").read_text()
    value = {
        line.split("=", 1)[0]: shlex.split(line.split("=", 1)[1])
        for line in text.splitlines()
        if line.startswith(("ExecStart=", "ExecStartPost="))
    }
    start, check = value["ExecStart"], value["ExecStartPost"]
    assert check[:3] == [start[0], "manage.py", "health"]
    parsed = (
        HealthCommand()
        .create_parser("manage.py", "health")
        .parse_args([arg.replace("%i", "create") for arg in check[3:]])
    )
    assert parsed.wait > 0
    argv = tuple(arg for arg in (parsed.process, parsed.queue) if arg)
    assert HEALTH_OF[argv][2:] == [arg.replace("%i", "create") for arg in start[2:]]


# --- what gobrave's own Pods may do -------------------------------------------------------


@pytest.mark.parametrize(("name", "spec"), _pod_specs(), ids=[name for name, _ in _pod_specs()])
def test_gobraves_pods_meet_the_restricted_profile_with_resources(name, spec):
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
    assert all("hostPath" not in volume for volume in spec.get("volumes", []))
    for container in _containers(spec):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["readOnlyRootFilesystem"] is True
        assert "privileged" not in context and "runAsUser" not in context
        for bound in ("requests", "limits"):
            assert set(container["resources"][bound]) == {"cpu", "memory"}, container["name"]


def test_only_the_pods_that_call_the_kubernetes_api_get_a_token_and_the_web_its_own():
    callers = {  # Pod: its ServiceAccount
        "gobrave-web": "gobrave-web",
        "gobrave-monitor": "gobrave",
        "gobrave-cluster-create": "gobrave",
        "gobrave-cluster-control": "gobrave",
    }
    for name, spec in _pod_specs():
        assert spec["automountServiceAccountToken"] is (name in callers), name
        if name in callers:
            assert spec["serviceAccountName"] == callers[name], name
    accounts = {doc["metadata"]["name"]: doc for doc in _by_kind("ServiceAccount")}
    assert set(accounts) == {"gobrave", "gobrave-web"}
    for account in accounts.values():
        assert account["automountServiceAccountToken"] is False  # only where a Pod asks


def test_secrets_are_referenced_never_written():
    assert _by_kind("Secret") == []
    for name, spec in _pod_specs():
        for container in _containers(spec):
            for env in container.get("env", []):
                if env["name"] in (
                    "DATABASE_URL",
                    "DJANGO_SECRET_KEY",
                    "GOBRAVE_API_METRICS_TOKEN",
                ):
                    assert "value" not in env, (name, env["name"])
                    assert env["valueFrom"]["secretKeyRef"]["name"] == "gobrave"
            names = {env["name"] for env in container.get("env", [])}
            assert "DJANGO_SECRET_KEY" in names, (name, container["name"])


# What the Kubernetes driver calls in the workers and the monitor
# (containers/engines/kubernetes/engine.py), and the metrics the idle culler reads:
# exactly this. The driver's own tests check that every call it makes is granted here.
ROLE_RULES = {
    ("", "pods"): {"get", "list", "watch", "create", "deletecollection"},
    ("", "pods/log"): {"get"},
    ("", "persistentvolumeclaims"): {"get", "create", "deletecollection"},
    ("", "secrets"): {"get", "create", "deletecollection", "patch"},
    ("metrics.k8s.io", "pods"): {"get", "list"},
}
# What the web tier calls: logs, and the admin's engine check, orphan and workspace
# removals. tests/engines/test_kubernetes.py drives each on the emulator.
WEB_ROLE_RULES = {
    ("", "pods/log"): {"get"},
    ("", "pods"): {"list", "deletecollection"},
    ("", "secrets"): {"deletecollection"},
    ("", "persistentvolumeclaims"): {"deletecollection"},
}


def _granted(role: dict) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], rule
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


@pytest.mark.parametrize(
    ("path", "account", "rules"),
    [("role.yaml", "gobrave", ROLE_RULES), ("web-role.yaml", "gobrave-web", WEB_ROLE_RULES)],
    ids=["driver", "web"],
)
def test_each_role_is_namespaced_grants_no_wildcard_and_exactly_its_callers_calls(
    path, account, rules
):
    assert not _by_kind("ClusterRole") and not _by_kind("ClusterRoleBinding")
    docs = _documents([BASE / path])
    assert sorted(doc["kind"] for doc in docs) == ["Role", "RoleBinding"]
    role = next(doc for doc in docs if doc["kind"] == "Role")
    assert _granted(role) == rules
    binding = next(doc for doc in docs if doc["kind"] == "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]
    }  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]


def test_the_web_role_grants_less_than_the_drivers_and_no_secret_reads():
    for (group, resource), verbs in WEB_ROLE_RULES.items():
        assert verbs <= ROLE_RULES[(group, resource)], (resource, verbs)
    assert not {"create", "watch", "patch"} & set().union(*WEB_ROLE_RULES.values())
    assert WEB_ROLE_RULES[("", "secrets")] == {"deletecollection"}


# --- network isolation --------------------------------------------------------------------


def _policy(name: str) -> dict:
    return next(doc for doc in _by_kind("NetworkPolicy") if doc["metadata"]["name"] == name)


def test_users_pods_take_no_connection_and_reach_no_pod_but_dns():
    spec = _policy("gobrave-users-isolated")["spec"]
    assert spec["podSelector"] == {
        "matchExpressions": [{"key": LABEL_INSTANCE, "operator": "Exists"}]
    }
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == []
    for rule in spec["egress"]:
        for peer in rule["to"]:
            if "ipBlock" in peer:
                block = peer["ipBlock"]
                assert block["cidr"] == "0.0.0.0/0"
                assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} <= set(block["except"])
            else:  # only the cluster's DNS, on its port
                assert peer["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
                assert {port["port"] for port in rule["ports"]} == {53}


def test_gobraves_pods_are_not_users_pods_and_listen_on_the_web_port_only():
    for doc in _documents():
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        template = doc["spec"]["template"]
        assert LABEL_INSTANCE not in template["metadata"]["labels"], doc["metadata"]["name"]
        assert template["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gobrave"
    spec = _policy("gobrave-control-plane")["spec"]
    assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/part-of": "gobrave"}}
    assert spec["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8000}]}]
    ports = [port["containerPort"] for port in _main_container("gobrave-web")["ports"]]
    assert ports == [8000]


# --- a runtime in another namespace ---------------------------------------------------------

RUNTIME_NAMESPACE_ROLES = [
    ("role.yaml", "gobrave", ROLE_RULES),
    ("web-role.yaml", "gobrave-web", WEB_ROLE_RULES),
]


@pytest.mark.parametrize(
    ("path", "account", "rules"), RUNTIME_NAMESPACE_ROLES, ids=["driver", "web"]
)
def test_a_runtime_namespace_grants_gobraves_accounts_the_base_roles_rules(path, account, rules):
    """The component's Roles are the base's (the same rules, the same names), bound to
    gobrave's ServiceAccounts in the namespace gobrave runs in, not in the runtime's."""
    docs = _documents([RUNTIME_NAMESPACE / path])
    assert sorted(doc["kind"] for doc in docs) == ["Role", "RoleBinding"]
    role = next(doc for doc in docs if doc["kind"] == "Role")
    base_role = next(doc for doc in _documents([BASE / path]) if doc["kind"] == "Role")
    assert role["metadata"]["name"] == base_role["metadata"]["name"]
    assert _granted(role) == _granted(base_role) == rules
    binding = next(doc for doc in docs if doc["kind"] == "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]
    }  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "gobrave"}
    ], binding["subjects"]


def test_a_runtime_namespace_isolates_users_pods_as_gobraves_own_namespace_does():
    docs = _documents([RUNTIME_NAMESPACE / "networkpolicy.yaml"])
    assert [doc["metadata"]["name"] for doc in docs] == ["gobrave-users-isolated"]
    assert docs[0]["spec"] == _policy("gobrave-users-isolated")["spec"]
    spec = yaml.safe_load((RUNTIME_NAMESPACE / KUSTOMIZATION).read_text())
    assert (spec["kind"], sorted(spec["resources"])) == (
        "Component",
        ["networkpolicy.yaml", "role.yaml", "web-role.yaml"],
    ), spec


def test_kubectl_kustomize_builds_a_runtime_namespace_bound_to_gobraves_namespace():
    built = _kubectl_build(RUNTIME_OVERLAY)
    if built is None:
        pytest.skip("kubectl is not installed (the kustomization files are checked above)")
    for doc in built:
        for version in VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    kinds = sorted(doc["kind"] for doc in built)
    assert kinds == ["Namespace", "NetworkPolicy", "Role", "Role", "RoleBinding", "RoleBinding"]
    runtime_namespace = yaml.safe_load((RUNTIME_OVERLAY / KUSTOMIZATION).read_text())["namespace"]
    gobraves = yaml.safe_load((OVERLAY / KUSTOMIZATION).read_text())["namespace"]
    assert runtime_namespace != gobraves
    namespaced = [doc for doc in built if doc["kind"] != "Namespace"]
    assert {doc["metadata"]["namespace"] for doc in namespaced} == {runtime_namespace}
    subjects = [doc["subjects"] for doc in built if doc["kind"] == "RoleBinding"]
    assert sorted(subject["name"] for [subject] in subjects) == ["gobrave", "gobrave-web"]
    assert {subject["namespace"] for [subject] in subjects} == {gobraves}, subjects
