"""Which env keys users may set on a template's containers, and which values are secret.

Operators are trusted, users are not (contract §8). A template's ``env`` is the
operator's; a user adds to it only what the template's ``user_env`` rules allow:

- a rule is a key (``MODE``), a prefix pattern (``APP_*``: any key starting ``APP_``;
  ``*`` alone: any key), or ``{"name": ..., "pattern": ..., "max_length": ...}`` where
  ``pattern`` is a regular expression the whole value must match and ``max_length``
  (at most ``MAX_USER_VALUE``) bounds it further;
- a key the template itself sets is replaced only when a rule names it exactly, never
  through a prefix pattern (``APP_*`` does not let users replace the template's
  ``APP_MODE``);
- keys in ``DENIED``, or starting with one of ``DENIED_PREFIXES``, decide what a program
  loads or runs before the operator's command acts (``LD_PRELOAD``, ``BASH_ENV``,
  ``PATH``...): users may never set them, whatever the rules say, and a rule naming one
  is refused when the template is saved;
- sizes are checked before any pattern runs: at most ``MAX_USER_KEYS`` keys, each value
  at most ``MAX_USER_VALUE`` characters.

A template's ``secret_env`` lists keys of its ``env`` whose values users must never see;
the resolved spec of each instance carries the same list as ``spec["secret_env"]``
(``redacted`` shows an env with those values hidden).

Everything here is pure (no I/O, no database).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from containers.errors import InvalidSpec

MAX_NAME = 128
MAX_USER_KEYS = 64
MAX_USER_VALUE = 4096
MAX_TEMPLATE_KEYS = 256
MAX_TEMPLATE_VALUE = 32768
MAX_RULES = 64
MAX_VALUE_PATTERN = 512
SECRET_PLACEHOLDER = "********"

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Keys that change how programs are found, loaded or started, or what a shell runs
# before the command: the dynamic loader, shell start-up files, interpreters' search
# paths and start-up options.
DENIED = frozenset(
    {
        # shells
        "BASH_ENV",
        "ENV",
        "PATH",
        "IFS",
        "CDPATH",
        "HOME",
        "SHELL",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "ZDOTDIR",
        # the C library
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "LOCPATH",
        "NLSPATH",
        "HOSTALIASES",
        "RESOLV_HOST_CONF",
        "TZDIR",
        # interpreters and runtimes
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONINSPECT",
        "PYTHONUSERBASE",
        "PYTHONBREAKPOINT",
        "PYTHONPLATLIBDIR",
        "PERL5LIB",
        "PERLLIB",
        "PERL5OPT",
        "PERL5DB",
        "RUBYLIB",
        "RUBYOPT",
        "NODE_OPTIONS",
        "NODE_PATH",
        "CLASSPATH",
        "JAVA_TOOL_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "_JAVA_OPTIONS",
        "LUA_PATH",
        "LUA_CPATH",
        "LUA_INIT",
        "TCLLIBPATH",
        "GIT_EXEC_PATH",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
    }
)
DENIED_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_", "GIT_CONFIG_")


def is_denied(name: str) -> bool:
    """True for a key users may never set (``DENIED``, ``DENIED_PREFIXES``)."""
    upper = name.upper()
    return upper in DENIED or upper.startswith(DENIED_PREFIXES)


@dataclass(frozen=True)
class EnvRule:
    """One entry of ``user_env``: which keys it opens and what their values may be."""

    name: str  # a key, or a prefix ending in "*"
    pattern: re.Pattern[str] | None = None
    max_length: int = MAX_USER_VALUE

    @property
    def is_prefix(self) -> bool:
        return self.name.endswith("*")

    def matches(self, key: str) -> bool:
        return key.startswith(self.name[:-1]) if self.is_prefix else key == self.name


_RULE_KEYS = frozenset({"name", "pattern", "max_length"})


def _rule(index: int, raw: Any) -> EnvRule:
    where = f"user_env[{index}]"
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict) or "name" not in raw or set(raw) - _RULE_KEYS:
        raise InvalidSpec(
            f"{where}: write a key, a prefix such as 'APP_*', or "
            '{"name", "pattern", "max_length"}',
            field="user_env",
        )
    name = raw["name"]
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise InvalidSpec(
            f"{where}.name: must be a key or a prefix ending in '*'", field="user_env"
        )
    stem = name[:-1] if name.endswith("*") else name
    if stem and not ENV_NAME.fullmatch(stem):
        raise InvalidSpec(
            f"{where}.name: {name!r} is not a key or a prefix ending in '*'", field="user_env"
        )
    # An exact denied key, or a prefix inside a denied family (``LD_*``), can never open
    # anything; a wider prefix (``L*``) is fine: the denied keys stay refused per request.
    if (name.endswith("*") and stem.upper().startswith(DENIED_PREFIXES)) or (
        not name.endswith("*") and is_denied(name)
    ):
        raise InvalidSpec(
            f"{where}.name: users may never set {name} (it changes how programs load or start)",
            field="user_env",
            key=name,
        )
    pattern = raw.get("pattern")
    compiled = None
    if pattern is not None:
        if not isinstance(pattern, str) or not 0 < len(pattern) <= MAX_VALUE_PATTERN:
            raise InvalidSpec(
                f"{where}.pattern: must be a regular expression of at most "
                f"{MAX_VALUE_PATTERN} characters",
                field="user_env",
            )
        try:
            compiled = re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise InvalidSpec(
                f"{where}.pattern: not a valid regular expression ({exc})", field="user_env"
            ) from None
    max_length = raw.get("max_length", MAX_USER_VALUE)
    if isinstance(max_length, bool) or not isinstance(max_length, int):
        raise InvalidSpec(
            f"{where}.max_length: must be a whole number up to {MAX_USER_VALUE}",
            field="user_env",
        )
    if not 0 <= max_length <= MAX_USER_VALUE:
        raise InvalidSpec(
            f"{where}.max_length: must be between 0 and {MAX_USER_VALUE}", field="user_env"
        )
    return EnvRule(name=name, pattern=compiled, max_length=max_length)


def parse_rules(user_env: Any) -> list[EnvRule]:
    """``user_env`` as rules; raises ``InvalidSpec`` naming the bad entry."""
    if user_env in (None, ""):
        return []
    if not isinstance(user_env, list):
        raise InvalidSpec("user_env: must be a list of keys or rules", field="user_env")
    if len(user_env) > MAX_RULES:
        raise InvalidSpec(f"user_env: at most {MAX_RULES} rules", field="user_env")
    return [_rule(index, raw) for index, raw in enumerate(user_env)]


def clean_user_env(user_env: Any) -> list[Any]:
    """Validate ``user_env`` for saving; returns it as given (strings or rule dicts)."""
    parse_rules(user_env)
    return list(user_env or [])


def clean_secret_env(secret_env: Any, *, env: Mapping[str, Any] | None = None) -> list[str]:
    """Validate ``secret_env``: a list of keys, each a key of ``env`` when ``env`` is given.

    Returns the keys sorted and without duplicates.
    """
    if secret_env in (None, ""):
        return []
    if not isinstance(secret_env, list) or len(secret_env) > MAX_TEMPLATE_KEYS:
        raise InvalidSpec("secret_env: must be a list of env keys", field="secret_env")
    for key in secret_env:
        if not isinstance(key, str) or len(key) > MAX_NAME or not ENV_NAME.fullmatch(key):
            raise InvalidSpec(f"secret_env: {key!r} is not an env key", field="secret_env")
        if env is not None and key not in env:
            raise InvalidSpec(
                f"secret_env: {key} is not a key of the template's env", field="secret_env", key=key
            )
    return sorted(set(secret_env))


def check_user_env(
    overrides: Mapping[str, Any] | None,
    *,
    rules: Any,
    template_env: Mapping[str, str],
) -> dict[str, str]:
    """The user's env, checked against the template's rules; raises ``InvalidSpec`` naming
    the first refused key (``details["key"]``).

    1. At most ``MAX_USER_KEYS`` keys; names valid and at most ``MAX_NAME`` long; values
       strings or numbers of at most ``MAX_USER_VALUE`` characters (before any pattern).
    2. A denied key is refused whatever the rules say.
    3. A key the template sets needs a rule naming it exactly; any other key needs a
       rule that matches it.
    4. The value must fit the first matching rule's ``max_length`` and ``pattern``.
    """
    if overrides in (None, ""):
        return {}
    if not isinstance(overrides, Mapping):
        raise InvalidSpec("env: must be a mapping of NAME: value", field="env")
    if len(overrides) > MAX_USER_KEYS:
        raise InvalidSpec(f"env: at most {MAX_USER_KEYS} keys", field="env")
    parsed = parse_rules(rules)
    cleaned: dict[str, str] = {}
    for key, raw in overrides.items():
        if not isinstance(key, str) or len(key) > MAX_NAME or not ENV_NAME.fullmatch(key):
            shown = key[:MAX_NAME] if isinstance(key, str) else key
            raise InvalidSpec(f"env: {shown!r} is not a valid variable name", field="env")
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise InvalidSpec(f"env.{key}: must be a string or a number", field="env", key=key)
        value = raw if isinstance(raw, str) else str(raw)
        if len(value) > MAX_USER_VALUE:
            raise InvalidSpec(
                f"env.{key}: at most {MAX_USER_VALUE} characters", field="env", key=key
            )
        if is_denied(key):
            raise InvalidSpec(
                f"env.{key}: users may not set {key} (it changes how programs load or start)",
                field="env",
                key=key,
            )
        if key in template_env:
            rule = next((r for r in parsed if not r.is_prefix and r.name == key), None)
            if rule is None:
                raise InvalidSpec(
                    f"env.{key}: set by the template, and the template does not let users "
                    "replace it",
                    field="env",
                    key=key,
                )
        else:
            rule = next((r for r in parsed if r.matches(key)), None)
            if rule is None:
                raise InvalidSpec(
                    f"env.{key}: the template does not let users set {key}", field="env", key=key
                )
        if len(value) > rule.max_length:
            raise InvalidSpec(
                f"env.{key}: at most {rule.max_length} characters", field="env", key=key
            )
        if rule.pattern is not None and rule.pattern.fullmatch(value) is None:
            raise InvalidSpec(
                f"env.{key}: the value does not match the template's pattern for {rule.name}",
                field="env",
                key=key,
            )
        cleaned[key] = value
    return cleaned


def redacted(env: Mapping[str, str], secret: Iterable[str]) -> dict[str, str]:
    """``env`` with the values of the ``secret`` keys replaced by ``SECRET_PLACEHOLDER``."""
    hidden = set(secret)
    return {k: (SECRET_PLACEHOLDER if k in hidden else v) for k, v in env.items()}
