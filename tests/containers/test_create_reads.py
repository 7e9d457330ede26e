"""What a create reads before its transaction (prepared statements on PostgreSQL): the
enabled runtimes, the installation id and the owner's first group."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from containers.installation import installation_id
from containers.models import Installation
from containers.placement.choice import runtime_select, runtimes_matching
from containers.requests.services import container_create_by_template
from tests.factories import RuntimeFactory, TemplateFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def variables_template(fake_runtime):
    return TemplateFactory(name="vars", env={"G": "$GROUPID", "U": "$USERID"})


def test_groupid_is_the_owner_s_first_group_and_their_own_id_without_one(
    postgres, variables_template, owner
):
    alone = container_create_by_template(template=variables_template, owner=owner, actor="t")
    assert alone.spec["env"]["G"] == str(owner.pk), alone.spec["env"]
    later, first = Group.objects.create(name="later"), Group.objects.create(name="first")
    owner.groups.add(first, later)
    grouped = container_create_by_template(template=variables_template, owner=owner, actor="t")
    assert grouped.spec["env"]["G"] == str(min(first.pk, later.pk)), grouped.spec["env"]


def test_the_runtime_is_chosen_among_the_enabled_ones_by_name(postgres, fake_runtime):
    template = TemplateFactory()
    RuntimeFactory(name="aaa-off", labels=dict(fake_runtime.labels), enabled=False)
    other = RuntimeFactory(name="zzz", labels=dict(fake_runtime.labels))
    assert (
        runtime_select(template=template).pk == min([fake_runtime, other], key=lambda r: r.name).pk
    )
    assert [r.pk for r in runtimes_matching(template=template, among=[other])] == [other.pk]


def test_the_installation_id_is_the_stored_one_and_made_once(postgres):
    first = installation_id()
    assert Installation.objects.get(pk=1).installation_id == first
    assert installation_id() == first
    Installation.objects.all().delete()
    again = installation_id()
    assert again and Installation.objects.get(pk=1).installation_id == again


def test_a_template_is_read_by_name_or_id_for_the_users_it_is_open_to(postgres, fake_runtime):
    from containers.errors import NotFound
    from containers.selectors import template_get
    from tests.factories import UserFactory

    lab = Group.objects.create(name="lab")
    limited = TemplateFactory(name="limited")
    limited.allowed_groups.add(lab)
    open_one = TemplateFactory(name="open")
    member, outsider = UserFactory(username="member"), UserFactory(username="outsider")
    member.groups.add(lab)
    for _ in range(2):  # the second time on the compiled, prepared statements
        assert template_get(ref="limited", user=member).pk == limited.pk
        assert template_get(ref=limited.pk, user=member).pk == limited.pk
        assert template_get(ref=str(open_one.pk), user=outsider).pk == open_one.pk
        for ref in ("limited", limited.pk, "nope"):
            with pytest.raises(NotFound):
                template_get(ref=ref, user=outsider)


def test_the_admission_gate_is_made_again_when_its_row_went_missing(postgres, template, owner):
    from containers.models import ContainerInstance, Gate
    from containers.requests.services import _admission_pending

    Gate.objects.filter(name="admission").delete()
    created = container_create_by_template(template=template, owner=owner, actor="t")
    assert Gate.objects.filter(name="admission").exists()
    assert ContainerInstance.objects.get(pk=created.pk).status == "pending"
    # With the row back, one call locks and counts (the new instance included).
    assert _admission_pending() == ContainerInstance.objects.filter(status="pending").count()
