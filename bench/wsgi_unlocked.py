# isort: skip_file
"""gobrave's WSGI app with the create limit check switched off (bench baseline only).

``containers.requests.services.container_create_by_template`` takes the global ``admission`` gate
and counts ``pending`` instances under it, in one call (``_admission_pending``). Here it
is patched away in this process only: no gate, and the count answers 0 without a query.
The rest of the create (runtime choice, spec, instance, history, outbox row, NOTIFY,
counters) is unchanged, so the difference to ``gobrave.wsgi`` is exactly the serialized
check.
"""

from gobrave.wsgi import application  # noqa: F401 - sets Django up first

import containers.requests.services as services  # noqa: E402

services._admission_pending = lambda: 0
