"""Place a ``pending`` instance as its create handler's first step does, without the engine:
under the capacity gate, through ``containers.requests.placing.instance_place``, then
``pending → creating``. For tests of where a create goes (placement happens when a create
leaves ``pending``, not when it is accepted)."""

from __future__ import annotations

from django.db import transaction

from containers.models import ContainerInstance
from containers.requests.lifecycle import capacity_available, instance_lock, move
from containers.requests.placing import instance_place


def place(instance: ContainerInstance) -> ContainerInstance:
    """The instance re-read after its placement; still ``pending`` (with the reason in its
    ``status_reason``) when no engine has room."""
    with transaction.atomic():
        locked = instance_lock(instance.pk, with_runtime=True)
        assert capacity_available(), "the global cap is full: raise it in the test"
        if not instance_place(locked):
            move(locked, "creating", actor="test", message="placed by the test")
    return ContainerInstance.objects.select_related("runtime").get(pk=instance.pk)
