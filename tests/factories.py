"""Test data factories."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from containers.installation import installation_id
from containers.models import ContainerInstance, ContainerTemplate, Runtime
from containers.queues import RequestKind
from outbox.models import OutboxEvent
from tenants.services import api_token_create


def spec_template(**fields) -> SimpleNamespace:
    """A template as ``resolve_spec`` reads it, with no database row: every field it
    reads, empty unless given."""
    base = dict(
        name="t",
        image="img",
        command=[],
        env={},
        user_env=[],
        secret_env=[],
        volumes=[],
        resources={},
        security={},
        pull_policy="never",
    )
    return SimpleNamespace(**{**base, **fields})


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")


_token_names = itertools.count(1)


def api_token(user, *, name: str | None = None, expiry=None) -> str:
    """A new API token of ``user``, made as users make theirs (``api_token_create``): its
    key, for ``Authorization: Token <key>``."""
    name = name or f"test-{next(_token_names)}"
    return api_token_create(user=user, name=name, expiry=expiry).key


class RuntimeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Runtime

    name = factory.Sequence(lambda n: f"fake{n}")
    driver = Runtime.Driver.FAKE
    base_url = factory.LazyAttribute(lambda o: f"fake:///tmp/gobrave-fake/{o.name}")
    labels = factory.LazyAttribute(lambda o: {"engine": "fake", "node": o.name})


class TemplateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ContainerTemplate

    name = factory.Sequence(lambda n: f"tmpl{n}")
    image = "gobrave-test-busybox:latest"
    command = ["sleep", "600"]
    constraints = {"engine": "fake"}
    pull_policy = "never"


class InstanceFactory(factory.django.DjangoModelFactory):
    """An instance placed directly in any state (bypassing requests), for table tests."""

    class Meta:
        model = ContainerInstance
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"inst{n}")
    owner = factory.SubFactory(UserFactory)
    template = factory.SubFactory(TemplateFactory)
    runtime = factory.SubFactory(RuntimeFactory)
    status = "pending"
    spec = factory.LazyAttribute(
        lambda o: {
            "name": "",
            "image": o.template.image,
            "labels": {},
            "command": o.template.command,
            "env": {},
            "mounts": [],
            "cpu": None,
            "memory": None,
            "pull_policy": "never",
        }
    )

    @factory.post_generation
    def fix_spec_name(obj, create, extracted, **kwargs):
        if create and not obj.spec.get("name"):
            obj.spec = {
                **obj.spec,
                "name": obj.container_name,
                "labels": {
                    "io.gobrave.installation": installation_id(),
                    "io.gobrave.instance": str(obj.id),
                    "io.gobrave.template": obj.template.name,
                },
            }
            obj.save(update_fields=["spec"])


class RequestFactory(factory.django.DjangoModelFactory):
    """A request row of ``instance`` in the outbox, on its kind's queue, placed directly
    in any state (bypassing the services): ``RequestFactory(instance=i, status=...)``;
    without ``instance``, for an instance id of its own that no row has."""

    class Meta:
        model = OutboxEvent

    class Params:
        instance = None

    kind = RequestKind.CREATE
    queue = factory.LazyAttribute(lambda o: RequestKind(o.kind).queue)
    aggregate_id = factory.LazyAttributeSequence(
        lambda o, n: str(o.instance.pk) if o.instance else f"00000000-0000-4000-8000-{n:012d}"
    )
    available_at = factory.LazyFunction(timezone.now)
