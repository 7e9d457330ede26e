"""The Docker engine: ``Engine`` over the ``docker`` SDK.

Pure library code (no Django). Every public method turns engine and transport errors
into ``EngineError`` (retriable: daemon unreachable, timeouts, 5xx, conflicts in
flight) or ``PermanentEngineError`` (4xx that no retry can fix, image missing under
``never``, a foreign container holding our name); no raw ``docker``/``requests``
exception escapes.

One SDK client (``docker.APIClient``) per process: it is created lazily and recreated
when the pid changes, so an engine object inherited across ``fork`` never reuses the
parent's sockets. A log follow has a client of its own (``follow_logs``).

Where what lives:
- ``engine``: ``DockerEngine`` (its capabilities, its client, ``ping``/``check``,
  ``node_name``), made of the parts below, each a class of its calls.
- ``client``: the SDK's client as we make it (keepalives, the version negotiated, the
  environment not read), ``TLSFiles``, ``NATIVE_SCHEMES``.
- ``errors``: engine and transport errors translated (``_translated``), HTTP statuses a
  retry can fix, a start refused for a stale task (``stale_task_of``).
- ``images``: ``image_present``, ``ensure_image`` and the pull (``PULL_POLICIES``,
  ``pull_error``).
- ``containers``: create (or adopt), start, stop, remove, inspect, statistics,
  ``list_ours``.
- ``workspaces``: ``ensure_workspace`` (``LABEL_WORKSPACE``), ``remove_volume``,
  ``volume_sizes``, ``ensure_network``.
- ``logs``: ``logs`` and ``follow_logs`` (natively through ``follow``, else on a thread).
- ``events``: the event stream (``EVENT_ACTIONS``) from a nanosecond cursor.
- ``follow``: the asynchronous follow over aiodocker (imported only where streams are).
- ``reasons``: why an engine does not answer, in an operator's words.
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up (``DockerEngine``'s own methods are
patched on the class, as before).
"""

from containers.engines.docker.client import KEEPALIVE_OPTIONS, NATIVE_SCHEMES, TLSFiles
from containers.engines.docker.engine import DockerEngine
from containers.engines.docker.errors import stale_task_of
from containers.engines.docker.events import EVENT_ACTIONS
from containers.engines.docker.images import PULL_POLICIES, pull_error
from containers.engines.docker.workspaces import LABEL_WORKSPACE

__all__ = [
    "EVENT_ACTIONS",
    "KEEPALIVE_OPTIONS",
    "LABEL_WORKSPACE",
    "NATIVE_SCHEMES",
    "PULL_POLICIES",
    "DockerEngine",
    "TLSFiles",
    "pull_error",
    "stale_task_of",
]
