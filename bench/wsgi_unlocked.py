# isort: skip_file
"""gobrave's WSGI app with the create limit check switched off (bench baseline only).

``containers.services.container_create_by_template`` takes the global ``admission`` gate
(``lock_gate``) and counts ``pending`` instances under it. Here both are patched away in
this process only: the gate is a no-op and the count answers 0 without a query. The rest
of the create (runtime choice, spec, instance, history, outbox row, NOTIFY, counters) is
unchanged, so the difference to ``gobrave.wsgi`` is exactly the serialized check.
"""

from gobrave.wsgi import application  # noqa: F401 - sets Django up first

import containers.services as services  # noqa: E402
from containers.models import ContainerInstance  # noqa: E402
from containers.states import Status  # noqa: E402


class _NoCount:
    def count(self) -> int:
        return 0


class _Manager:
    """``ContainerInstance.objects`` except the pending count of the admission check."""

    def filter(self, *args, **kwargs):
        if not args and kwargs == {"status": Status.PENDING}:
            return _NoCount()
        return ContainerInstance.objects.filter(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(ContainerInstance.objects, name)


class _Model:
    objects = _Manager()
    DoesNotExist = ContainerInstance.DoesNotExist


services.lock_gate = lambda name: None
services.ContainerInstance = _Model
