"""Place a ``pending`` instance as its create handler's first step does, without the engine:
under the capacity gate, through ``containers.requests.placing.create_admit``, then
``pending → creating`` with the placement saved. For tests of where a create goes
(placement happens when a create leaves ``pending``, not when it is accepted)."""

from __future__ import annotations

from django.db import transaction

from containers.models import ContainerInstance
from containers.requests.lifecycle import instance_lock, move
from containers.requests.placing import PLACED_FIELDS, create_admit


def place(instance: ContainerInstance) -> ContainerInstance:
    """The instance re-read after its placement; still ``pending`` (with the reason in its
    ``status_reason``) when no engine has room."""
    with transaction.atomic():
        locked = instance_lock(instance.pk, with_runtime=True)
        waits = create_admit(locked)
        assert waits is not None, "the global cap is full: raise it in the test"
        if not waits:
            move(locked, "creating", actor="test", message="placed", saved=PLACED_FIELDS)
    return ContainerInstance.objects.select_related("runtime").get(pk=instance.pk)
