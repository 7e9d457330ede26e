"""Property-based run of every API operation against its OpenAPI schema (schemathesis).

In-process against the ASGI application that production serves (``gobrave.asgi``),
authenticated as a superuser (who may call every operation), deterministic, at least 25
generated examples per operation, positive and negative inputs. Every response must be no
5xx, have a documented status code and content type, and conform to the documented schema
(errors included)."""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from containers.requests.services import container_create_by_template
from core.counters import counters_buffer_stop
from gobrave.asgi import django_application
from tests.factories import InstanceFactory, UserFactory, api_token

# gobrave.asgi buffers request counters per web process; this test process is no web
# server, and the other tests read counters as soon as they are bumped.
counters_buffer_stop()

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


# Generated once at collection, as /api/schema/?format=json serves it (which needs a login,
# and there is no database yet); one test per operation.
def _schema() -> dict:
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(public=True)))


schema = schemathesis.openapi.from_dict(_schema())
schema.app = django_application
schema.config.generation.update(max_examples=25, deterministic=True, with_security_parameters=False)


# The application runs its views in threads of its own (each with its own database
# connection), so what a test writes must be committed for them to see it.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff_headers(template, fake_runtime):
    staff = UserFactory(username="root", is_staff=True, is_superuser=True)
    # Something to find: an instance in a resting state and one outbox row.
    InstanceFactory(owner=staff, template=template, runtime=fake_runtime)
    container_create_by_template(template=template, owner=staff, actor="test")
    return {"Authorization": f"Token {api_token(staff)}"}


@schema.parametrize()
@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_schema(case, staff_headers):
    case.call_and_validate(headers=staff_headers, checks=CHECKS)
