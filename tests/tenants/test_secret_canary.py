"""The secret hunt: a canary value planted in every place a secret can live must reach no
one without the permission to see secrets (docs/security.md, "What users never see").

``PLACES`` lists where secrets live, one line each; a feature that adds a place for a
secret (runtime credentials, webhook secrets, API tokens, stored DAG output) adds a
``Place`` whose ``plant`` puts ``place.canary`` there. The test then has alice (a user)
use everything (an instance of every template, a run of every DAG template, on the fake
engine; each container prints its env), and fetches, as every role: every API GET
endpoint (JSON and the browsable API), the follow stream of every instance's logs, every
admin page (index, app lists, changelists, the change page of every object, the extra
views), ``/metrics``, a user's token page; and reads every history row and every log
record written meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.contrib import admin
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from containers.engines import engine_for
from containers.models import ContainerEvent, ContainerInstance, ContainerTemplate, Runtime
from dags.models import DagEvent, DagRun, DagTemplate
from dags.runner import dag_run_advance
from dags.services import dag_template_save
from outbox.models import OutboxEvent
from outbox.registry import Defer
from tests.api.helpers import stream_get
from tests.factories import TemplateFactory
from tests.processes import relay_drain
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db

SEE_SECRETS = {"operator", "superuser"}  # containers.change_containertemplate


@dataclass(frozen=True)
class Place:
    name: str
    plant: Callable[[str], None]  # puts the canary it is given there
    operators_see_it: bool = True  # False for a write-only secret (shown to no one)

    @property
    def canary(self) -> str:
        return "canary-" + re.sub(r"[^a-z0-9]+", "-", self.name.lower()) + "-5e7c1d"


def plant_template_env(canary: str) -> None:
    TemplateFactory(
        name="vault", command=["env"], env={"TOKEN": canary, "MODE": "on"}, secret_env=["TOKEN"]
    )


def plant_dag_node_env(canary: str) -> None:
    TemplateFactory(
        name="dag-vault", command=["env"], env={"TOKEN": "set-by-node"}, secret_env=["TOKEN"]
    )
    dag_template_save(
        name="dag-vault", nodes=[{"key": "a", "template": "dag-vault", "env": {"TOKEN": canary}}]
    )


def plant_dag_node_output(canary: str) -> None:
    """A failed node's output kept by the runner (``dags.runner``) that printed a secret."""
    from django.contrib.auth import get_user_model

    from dags.services import dag_node_output_keep, dag_run_start

    TemplateFactory(name="dag-out", env={"TOKEN": canary}, secret_env=["TOKEN"])
    dag = dag_template_save(name="dag-out", nodes=[{"key": "a", "template": "dag-out"}])
    alice = get_user_model().objects.get(username="alice")
    run = dag_run_start(dag=dag, owner=alice, actor="test")
    dag_node_output_keep(run_id=run.pk, key="a", attempt=1, output=f"TOKEN={canary}\n", actor="t")


def plant_api_token(canary: str) -> None:
    """alice makes an API token through the API whose key is the canary: knox's random
    source is the one thing replaced (a key must be random to be a key, and the canary
    must be it); the answer that shows it once is the plant's, not looked at."""
    from unittest import mock

    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(get_user_model().objects.get(username="alice"))
    with mock.patch("knox.crypto.create_token_string", return_value=canary):
        response = client.post("/api/tokens/", {"name": "canary"}, format="json")
    assert response.status_code == 201 and response.json()["key"] == canary, response.content


def plant_runtime_tls_key(canary: str) -> None:
    """A runtime whose client key file (a real key, the canary in its PEM: text before the
    BEGIN line is read past) serves a TLS engine that refuses every connection: the
    admin's page checks it (the key is loaded), every other page and answer names it."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    from tests.pki import Pki

    directory = tempfile.mkdtemp(prefix="gobrave-canary-")
    atexit.register(shutil.rmtree, directory, True)
    pki = Pki(Path(directory))
    pki.ca("ca")
    pki.signed("ca", "client", "extendedKeyUsage=clientAuth")
    key = Path(pki.key("client"))
    key.write_text(f"{canary}\n{key.read_text()}")
    from containers.fleet.runtimes import runtime_create

    runtime_create(  # through the service: its history entry is on the events feed too
        actor="user:canary-operator",
        name="tls-canary",
        driver=Runtime.Driver.DOCKER,
        base_url="tcp://127.0.0.1:1",
        tls_ca_cert=pki.cert("ca"),
        tls_client_cert=pki.cert("client"),
        tls_client_key=str(key),
        enabled=False,  # no placement: the users' instances stay on the fake engine
    )


def plant_kubeconfig_token(canary: str) -> None:
    """A Kubernetes runtime whose kubeconfig file holds the canary as its bearer token, for
    an API that refuses every connection (a closed loopback port): the admin's page checks
    it (the file is loaded), every page and answer names its path only."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    import yaml

    from tests.pki import Pki

    directory = tempfile.mkdtemp(prefix="gobrave-canary-")
    atexit.register(shutil.rmtree, directory, True)
    pki = Pki(Path(directory))
    pki.ca("ca")
    kubeconfig = Path(directory) / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://127.0.0.1:1",
                            "certificate-authority": pki.cert("ca"),
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": canary}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    kubeconfig.chmod(0o600)
    runtime = Runtime(
        name="kube-canary",
        driver=Runtime.Driver.KUBERNETES,
        kube_namespace="canary",
        kube_config=str(kubeconfig),
        kube_context="ctx",
        enabled=False,  # no placement: the users' instances stay on the fake engine
    )
    runtime.full_clean()
    runtime.save()


def plant_webhook_secret(canary: str) -> None:
    """An operator's webhook endpoint whose signing secret is the canary (the random
    source is the one thing replaced, as for the API token), rotated once so that the
    canary is the older of two live secrets. Disabled, on a closed loopback port: this
    test delivers nothing."""
    from unittest import mock

    from django.conf import settings

    from webhooks.services import (
        webhook_endpoint_create,
        webhook_endpoint_disable,
        webhook_endpoint_rotate,
    )

    loopback = {"allow_http": True, "allow_private": True}
    with (
        mock.patch.dict(settings.GOBRAVE["webhooks"], loopback),
        mock.patch("webhooks.services.new_secret", return_value=canary),
    ):
        made = webhook_endpoint_create(url="http://127.0.0.1:1/hook", event_kinds=["request.dead"])
    assert made.secret == canary
    webhook_endpoint_rotate(endpoint_id=made.endpoint.pk)
    webhook_endpoint_disable(endpoint_id=made.endpoint.pk, reason="the canary's")


def plant_user_webhook_secret(canary: str) -> None:
    """alice (a user: ``webhooks.users_may_subscribe`` is on in this test) subscribes her
    own endpoint through the API, its secret the canary (the random source replaced; the
    answer that shows it once is the plant's, not looked at), on a closed loopback port;
    an event of hers makes a delivery, which the test attempts once
    (``_attempt_deliveries``): its failure, retried later, is on the row and in the logs.
    """
    from unittest import mock

    from django.contrib.auth import get_user_model
    from django.db import transaction
    from rest_framework.test import APIClient

    from webhooks.kinds import EventKind
    from webhooks.services import webhook_event_emit

    alice = get_user_model().objects.get(username="alice")
    client = APIClient()
    client.force_login(alice)
    with mock.patch("webhooks.services.new_secret", return_value=canary):
        answer = client.post(
            "/api/webhooks/",
            {"url": "http://127.0.0.1:1/alice", "event_kinds": ["instance.failed"]},
            format="json",
        )
    assert answer.status_code == 201 and answer.json()["secret"] == canary, answer.content
    assert answer.json()["owner"] == "alice", answer.content
    with transaction.atomic():
        made = webhook_event_emit(
            kind=EventKind.INSTANCE_FAILED, owner_id=alice.pk, data={"reason": "the canary's"}
        )
    assert made == 1, made


PLACES = [
    Place("template env", plant_template_env),
    Place("DAG node env", plant_dag_node_env),
    Place("stored DAG node output", plant_dag_node_output),
    Place("API token", plant_api_token, operators_see_it=False),  # its key: shown to no one
    Place("runtime TLS key", plant_runtime_tls_key, operators_see_it=False),  # the file's
    Place("kubeconfig token", plant_kubeconfig_token, operators_see_it=False),  # the file's
    Place("webhook secret", plant_webhook_secret, operators_see_it=False),  # shown once
    Place("user's webhook secret", plant_user_webhook_secret, operators_see_it=False),
]


def _routes(patterns, prefix: str = ""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def _pks(model) -> list[str]:
    return [str(pk) for pk in model.objects.values_list("pk", flat=True)]


def _api_paths() -> list[str]:
    """Every API path a GET answers, with each detail route filled with every object's id."""
    models = {
        "containers": ContainerInstance,
        "templates": ContainerTemplate,
        "runtimes": Runtime,
        "outbox": OutboxEvent,
        "dag-templates": DagTemplate,
        "dag-runs": DagRun,
        "webhooks": WebhookEndpoint,
    }
    ids = {name: _pks(model) for name, model in models.items()}
    paths = []
    for route, pattern in _routes(get_resolver().url_patterns):
        if not route.startswith("api/") or "format" in pattern.pattern.regex.groupindex:
            continue
        actions = getattr(pattern.callback, "actions", None)
        if actions is not None and "get" not in actions:
            continue
        path = "/" + route.replace("^", "").replace("$", "")
        if "(?P<pk>" not in path:
            paths.append(path)
            continue
        resource = path.split("/")[2]
        assert resource in ids, f"a new API resource: add its ids here ({route})"
        for pk in ids[resource]:
            paths.append(re.sub(r"\(\?P<pk>[^)]*\)", pk, path))
    paths += [f"/api/containers/{pk}/logs/?follow=1&seconds=5" for pk in ids["containers"]]
    return paths


STANDARD_ADMIN = re.compile(r"_(add|delete|history|change|changelist|autocomplete)$")
SKIPPED_ADMIN = {"logout", "login", "password_change", "password_change_done", "jsi18n"}


def _admin_paths() -> list[str]:
    """The admin's index and app lists, every changelist and every object's change page,
    and every extra view (with no argument, or an object's id)."""
    paths = [reverse("admin:index")]
    labels = {model._meta.app_label for model in admin.site._registry}
    paths += [reverse("admin:app_list", args=[label]) for label in sorted(labels)]
    for model, model_admin in admin.site._registry.items():
        info = model._meta.app_label, model._meta.model_name
        paths.append(reverse("admin:{}_{}_changelist".format(*info)))
        pks = list(model._default_manager.values_list("pk", flat=True))
        paths += [reverse("admin:{}_{}_change".format(*info), args=[pk]) for pk in pks]
        for pattern in model_admin.get_urls():
            name = getattr(pattern, "name", None)
            if not isinstance(pattern, URLPattern) or not name or STANDARD_ADMIN.search(name):
                continue
            if "object_id" in str(pattern.pattern):
                paths += [reverse(f"admin:{name}", args=[pk]) for pk in pks]
            elif "<" not in str(pattern.pattern):
                paths.append(reverse(f"admin:{name}"))
    for pattern in admin.site.get_urls():
        name = getattr(pattern, "name", None)
        plain = isinstance(pattern, URLPattern) and "<" not in str(pattern.pattern)
        if plain and name and name not in SKIPPED_ADMIN and name != "index":
            paths.append(reverse(f"admin:{name}"))
    return paths


def _text(response) -> str:
    return response.content.decode(errors="replace")


def _is_stream(path: str) -> bool:
    return "follow=1" in path or path.endswith("/stream/")


def _get(client, path: str) -> str:
    """What ``client`` is answered at ``path``; a stream (a follow, a live page's events)
    read to its end through the ASGI client (the test's config ends a quiet one soon)."""
    if _is_stream(path):
        return stream_get(client, path)[1].decode(errors="replace")
    return _text(client.get(path))


def _use_everything(alice) -> list[tuple[str, str]]:
    """alice makes an instance of every template and runs every DAG template; the engine
    runs them (each prints its env) and they exit. Returns the answers she got."""
    answers = []
    for name in ContainerTemplate.objects.values_list("name", flat=True):
        response = alice.post("/api/containers/", {"template": name}, format="json")
        assert response.status_code == 202, response.content
        answers.append((f"POST /api/containers/ {name}", _text(response)))
    for name in DagTemplate.objects.values_list("name", flat=True):
        response = alice.post("/api/dag-runs/", {"template": name}, format="json")
        assert response.status_code == 202, response.content
        answers.append((f"POST /api/dag-runs/ {name}", _text(response)))
    for run_id in DagRun.objects.values_list("pk", flat=True):
        with contextlib.suppress(Defer):  # more to do later: this advance is enough
            dag_run_advance(run_id=str(run_id))
    relay_drain()
    for instance in ContainerInstance.objects.select_related("runtime"):
        assert instance.container_id, f"{instance.name} was never created: {instance.status}"
        engine_for(instance.runtime).stop(instance.container_id, 0)
    return answers


def _attempt_deliveries() -> list[tuple[int, str]]:
    """Every due webhook delivery attempted once (``relay_drain`` runs the container
    queues only): to a closed port, each fails and is retried later. Returns each
    delivery's attempts and last error."""
    from outbox import relay
    from webhooks.kinds import DELIVERY_KIND, QUEUE

    for event_id, token in relay.claim(QUEUE, 16):
        relay.execute(event_id, token)
    rows = OutboxEvent.objects.filter(kind=DELIVERY_KIND).order_by("id")
    return list(rows.values_list("attempts", "last_error"))


def _history() -> list[tuple[str, str]]:
    rows = [
        (f"ContainerEvent {e.pk}", f"{e.message} {e.data}") for e in ContainerEvent.objects.all()
    ]
    rows += [(f"DagEvent {e.pk}", f"{e.message} {e.data}") for e in DagEvent.objects.all()]
    rows += [
        (f"OutboxEvent {e.pk}", f"{e.payload} {e.last_error}") for e in OutboxEvent.objects.all()
    ]
    return rows  # fmt: skip


def test_no_secret_reaches_anyone_without_the_permission_to_see_it(
    callers, fake_runtime, caplog, gobrave_config
):
    caplog.set_level(logging.DEBUG)
    # A quiet stream ends after 0.3 s, so each is read to its end (what it sends first,
    # it sends at once); the leases of this test's streams are released by other
    # connections, which its transaction hides.
    gobrave_config(streams={"idle_seconds": 0.3, "per_user": 10_000, "total": 100_000})
    # Users may subscribe endpoints, and deliveries may go to the test's closed loopback port.
    gobrave_config(
        webhooks={"users_may_subscribe": True, "allow_http": True, "allow_private": True}
    )
    for place in PLACES:
        place.plant(place.canary)
    answers = _use_everything(callers["user"].api)
    tried = _attempt_deliveries()
    assert tried and all(n == 1 and "refused" in error for n, error in tried), tried
    api, pages = _api_paths(), _admin_paths()

    leaks: list[str] = []
    seen: set[str] = set()  # canaries operators saw: each plant really planted

    def look(role: str, where: str, text: str) -> None:
        for place in PLACES:
            if place.canary in text:
                if role in SEE_SECRETS:
                    seen.add(place.canary)
                else:
                    at = text.index(place.canary)
                    leaks.append(
                        f"{place.name} -> {role}: {where}: …{text[max(0, at - 80) : at + 40]!r}"
                    )

    for where, text in answers:
        look("user", where, text)
    for role, caller in callers.items():
        for path in api:
            look(role, f"GET {path}", _get(caller.api, path))
            if not _is_stream(path):  # a stream is text or events, never the browsable API
                browsable = path + ("&" if "?" in path else "?") + "format=api"
                look(role, f"GET {browsable} (session)", _text(caller.web.get(browsable)))
        for path in [*pages, "/metrics", reverse("tokens")]:
            look(role, f"GET {path}", _get(caller.web, path))
    for where, text in _history():
        look("anyone", f"history: {where}", text)
    for record in caplog.records:
        line = record.getMessage() + (record.exc_text or "")
        look("anyone", f"log {record.name} {record.levelname}", line)

    assert not leaks, "\n".join(leaks)
    shown = [p.name for p in PLACES if not p.operators_see_it and p.canary in seen]
    assert not shown, f"write-only secrets shown to operators: {shown}"
    unseen = [p.name for p in PLACES if p.operators_see_it and p.canary not in seen]
    assert not unseen, (
        f"planted but never shown to operators (a plant that plants nothing?): {unseen}"
    )
