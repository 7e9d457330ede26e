"""Load and validate ``config.yml`` once, at start.

The file has six sections (``container``, ``outbox``, ``api``, ``streams``, ``queue``,
``webhooks``).
Every key has a default and a validator; an unknown key or a bad value raises
``ConfigError`` naming the key, which stops the process before it serves anything.
Any key may be overridden by the environment as ``GOBRAVE_<SECTION>_<KEY>`` (upper
case); the value is read as YAML, so ``true``, ``5`` and ``[a, b]`` mean what they say.

Where what lives:
- ``values``: ``ConfigError`` and the validators of one value each, and of a nested
  mapping (``_nested``).
- ``security``: ``container.security``: its validators (``container_user``,
  ``capabilities``...), ``SECURITY_SCHEMA`` and ``SECURITY_DEFAULTS``.
- ``schema``: ``SCHEMA`` (every section's keys, validators and defaults), ``POLICY_SCHEMA``
  and ``POLICY_DEFAULTS``, ``NESTED``.
- ``loading``: ``load_config`` and the checks of keys that depend on each other.
The names below are re-exported so callers import them from this package; a test that
replaces one must patch the module that looks it up.
"""

from core.config.loading import load_config
from core.config.schema import EXTENDERS, NESTED, POLICY_DEFAULTS, POLICY_SCHEMA, SCHEMA
from core.config.security import (
    NEVER_CAPABILITIES,
    SECURITY_DEFAULTS,
    SECURITY_SCHEMA,
    capabilities,
    container_user,
)
from core.config.values import ConfigError

__all__ = [
    "ConfigError",
    "EXTENDERS",
    "NESTED",
    "NEVER_CAPABILITIES",
    "POLICY_DEFAULTS",
    "POLICY_SCHEMA",
    "SCHEMA",
    "SECURITY_DEFAULTS",
    "SECURITY_SCHEMA",
    "capabilities",
    "container_user",
    "load_config",
]
