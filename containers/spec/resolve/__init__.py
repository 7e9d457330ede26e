"""Request-time resolution: a template plus an owner and an instance become a spec.

The worker never re-reads the template; it runs exactly the spec stored on the
instance when the request was accepted. Everything here is pure (no I/O beyond the
objects passed in), so it is unit-tested without a database.

Where what lives:
- ``expansion``: ``expand`` (``$VAR`` and ``${VAR}`` in a template's values).
- ``fields``: a template's fields checked and normalized, each bounded (``clean_command``,
  ``command_from_text``, ``clean_env``, ``clean_volumes``, ``clean_resources`` and
  ``parse_memory``), and all at once (``clean_template_fields``).
- ``constraints``: ``clean_constraints``, ``node_selector`` and ``labels_match``.
- ``volumes``: bind sources against the allowed roots when a template is saved
  (``check_volume_roots``), and a template's volumes made mounts at a request
  (``resolve_mounts``).
- ``spec``: ``resolve_spec`` (the stored spec), ``user_env_for`` and ``template_snapshot``.
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up.
"""

from containers.spec.resolve.constraints import (
    NODE_CONSTRAINT_PREFIX,
    clean_constraints,
    labels_match,
    node_selector,
)
from containers.spec.resolve.expansion import expand
from containers.spec.resolve.fields import (
    MAX_COMMAND_PART,
    MAX_COMMAND_PARTS,
    MAX_CPU,
    MAX_MEMORY,
    MAX_PIDS,
    MAX_VOLUMES,
    MIN_MEMORY,
    clean_command,
    clean_env,
    clean_resources,
    clean_template_fields,
    clean_volumes,
    command_from_text,
    parse_memory,
)
from containers.spec.resolve.spec import resolve_spec, template_snapshot, user_env_for
from containers.spec.resolve.volumes import VARIABLE_NAMES, check_volume_roots, resolve_mounts

__all__ = [
    "MAX_COMMAND_PART",
    "MAX_COMMAND_PARTS",
    "MAX_CPU",
    "MAX_MEMORY",
    "MAX_PIDS",
    "MAX_VOLUMES",
    "MIN_MEMORY",
    "NODE_CONSTRAINT_PREFIX",
    "VARIABLE_NAMES",
    "check_volume_roots",
    "clean_command",
    "clean_constraints",
    "clean_env",
    "clean_resources",
    "clean_template_fields",
    "clean_volumes",
    "command_from_text",
    "expand",
    "labels_match",
    "node_selector",
    "parse_memory",
    "resolve_mounts",
    "resolve_spec",
    "template_snapshot",
    "user_env_for",
]
