"""Property-based run of every API operation against its OpenAPI schema (schemathesis).

In-process against the WSGI application, authenticated as a superuser (who may call every
operation), deterministic, at least 25 generated examples per operation, positive and
negative inputs. Every response must be no 5xx, have a documented status code and
content type, and conform to the documented schema (errors included).
"""

from __future__ import annotations

import json

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
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
from gobrave.wsgi import application
from tests.factories import InstanceFactory, UserFactory, api_token

# gobrave.wsgi buffers request counters per web process; this test process is no web
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
schema.app = application
schema.config.generation.update(max_examples=25, deterministic=True, with_security_parameters=False)


@pytest.fixture(autouse=True)
def requests_inside_the_test_transaction(db):
    """A WSGI request closes the database connection when it ends; the test transaction
    must survive every example, so (as Django's test client does) that hook is off here.
    """
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


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
