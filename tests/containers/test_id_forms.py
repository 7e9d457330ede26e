"""The CLI's instance references take the API's one id form: a uuid, or a prefix of at
least 8 hex digits (or the instance's name); a shorter prefix names nothing."""

from __future__ import annotations

import uuid

import pytest

from containers.errors import NotFound
from containers.selectors import instance_resolve
from tests.factories import InstanceFactory

pytestmark = pytest.mark.django_db

ID = uuid.UUID("abcdef12-3456-4789-8abc-def012345678")


def test_the_cli_refuses_a_prefix_shorter_than_eight_hex_digits(template, fake_runtime, owner):
    InstanceFactory(id=ID, owner=owner, template=template, runtime=fake_runtime, name="web")
    assert instance_resolve(ref="abcdef12").id == ID
    with pytest.raises(NotFound):
        instance_resolve(ref="abcdef")
