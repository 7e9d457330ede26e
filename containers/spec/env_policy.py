"""Which env keys users may set on a template's containers, and which values are secret.

Operators are trusted, users are not (contract §8). A template's ``env`` is the
operator's; a user adds to it only what the template's ``user_env`` rules allow. Letting
users set env is letting them influence the program, so the rules are an allow-list:

- a rule is a key (``MODE``), a prefix in the operator's own namespace ending in ``_*``
  (``APP_*``: any key starting ``APP_``), or ``{"name": ..., "pattern": ..., "max_length":
  ...}`` where ``pattern`` is a regular expression the whole value must match and
  ``max_length`` (at most ``MAX_USER_VALUE``) bounds it further;
- a bare ``*``, a prefix not ending in ``_*``, and any rule that could match a key some
  runtime reads at start-up (``STARTUP_KEYS``: ``PYTHONWARNINGS``, ``GIT_*``...) are
  refused when the template is saved, with the reason; rules stored before they were
  refused open nothing at request time;
- a key the template itself sets is replaced only when a rule names it exactly, never
  through a prefix (``APP_*`` does not let users replace the template's ``APP_MODE``);
- the start-up keys are also refused per request, whatever the rules say (a second wall),
  compared case-insensitively;
- sizes are checked before any pattern runs: at most ``MAX_USER_KEYS`` keys, each value
  at most ``MAX_USER_VALUE`` characters.

User values are literal: gobrave's variables expand only in the operator's values
(``containers.spec.resolve.resolve_spec``).

A template's ``secret_env`` lists keys of its ``env`` whose values users must never see;
the resolved spec of each instance carries the same list as ``spec["secret_env"]``
(``redacted`` shows an env with those values hidden).

Everything here is pure (no I/O, no database).
"""

from __future__ import annotations

import json
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

# Who reads each key when a program starts (a key ending in "*" stands for every key with
# that prefix): what these say decides which code runs, which files are loaded, where
# traffic goes or which certificates are trusted, before or around the operator's command.
# A user may never set one, and no rule may open one. Compared case-insensitively.
STARTUP_KEYS: dict[str, tuple[str, ...]] = {
    "the shell": (
        "BASH_*", "BASHOPTS", "ENV", "PATH", "IFS", "CDPATH", "HOME", "SHELL", "SHELLOPTS",
        "PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "ZDOTDIR", "FPATH", "HISTFILE",
        "INPUTRC", "GLOBIGNORE", "EXECIGNORE", "POSIXLY_CORRECT", "TERMINFO",
        "TERMINFO_DIRS", "TERMCAP", "XDG_*", "SSH_ASKPASS", "SUDO_ASKPASS",
    ),
    "programs the command may open": (
        "PAGER", "MANPAGER", "SYSTEMD_PAGER", "EDITOR", "VISUAL", "BROWSER", "LESS",
        "LESSOPEN", "LESSCLOSE", "LESSKEY", "LESSKEYIN", "LESSEDIT", "LESSSECURE",
        "LESSHISTFILE", "LESS_*", "EXINIT", "VIMINIT", "MYVIMRC", "GVIMINIT",
        "EMACSLOADPATH",
    ),
    "the C library and the dynamic loader": (
        "LD_*", "DYLD_*", "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH",
        "HOSTALIASES", "RESOLV_HOST_CONF", "RES_OPTIONS", "LOCALDOMAIN", "TZ", "TZDIR",
        "MALLOC_*", "LIBC_FATAL_STDERR_", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS",
        "MSAN_OPTIONS", "TSAN_OPTIONS", "TMPDIR", "TMP", "TEMP", "TEMPDIR",
    ),
    "the locale": ("LANG", "LANGUAGE", "LC_*", "TEXTDOMAINDIR"),
    "Python": ("PYTHON*", "VIRTUAL_ENV", "PIP_*", "COVERAGE_PROCESS_START", "COVERAGE_RCFILE"),
    "Node": ("NODE_*", "NPM_CONFIG_*", "YARN_*", "COREPACK_*", "UV_THREADPOOL_SIZE"),
    "the JVM": (
        "JAVA_*", "_JAVA_*", "JDK_*", "CLASSPATH", "MAVEN_*", "GRADLE_*", "ANT_OPTS",
        "CATALINA_OPTS", "JRUBY_OPTS", "SBT_OPTS", "JVM_OPTS",
    ),
    ".NET": ("DOTNET_*", "CORECLR_*", "COMPLUS_*", "COR_*", "ASPNETCORE_*"),
    "Ruby": ("RUBY*", "GEM_*", "BUNDLE_*", "BUNDLER_*"),
    "PHP": ("PHP*",),
    "Perl": ("PERL*",),
    "R": ("R_*",),
    "Go": (
        "GOROOT", "GOPATH", "GOFLAGS", "GODEBUG", "GOENV", "GOTOOLCHAIN", "GOPROXY",
        "GONOPROXY", "GOPRIVATE", "GONOSUMDB", "GONOSUMCHECK", "GOSUMDB", "GOINSECURE",
        "GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GOTRACEBACK", "GOCACHE", "GOMODCACHE",
        "GOEXPERIMENT", "GOBIN", "GOOS", "GOARCH", "GOWORK", "GOVCS", "GOAUTH", "GOTMPDIR",
        "GOCOVERDIR", "GOTELEMETRY", "GO111MODULE", "GCCGO", "CGO_*",
    ),
    "Lua and Tcl": ("LUA_*", "TCLLIBPATH", "TCL_LIBRARY"),
    "OpenSSL and TLS libraries": ("OPENSSL_*", "SSL_*", "SSLKEYLOGFILE", "GNUTLS_*"),
    "git": ("GIT_*",),
    "HTTP clients (proxies and CA bundles)": (
        "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY", "RSYNC_PROXY",
        "SOCKS_PROXY", "SOCKS5_PROXY", "GRPC_PROXY", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
        "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "CURL_HOME", "AWS_CA_BUNDLE", "WGETRC",
    ),
}  # fmt: skip

_READER = {key.upper(): reader for reader, keys in STARTUP_KEYS.items() for key in keys}
DENIED = frozenset(k for k in _READER if not k.endswith("*"))
DENIED_PREFIXES = tuple(sorted(k[:-1] for k in _READER if k.endswith("*")))


def reader_of(name: str) -> str | None:
    """Who reads ``name`` at start-up (``STARTUP_KEYS``), or None; any case."""
    upper = name.upper()
    if upper in DENIED:
        return _READER[upper]
    prefix = next((p for p in DENIED_PREFIXES if upper.startswith(p)), None)
    return None if prefix is None else _READER[prefix + "*"]


def is_denied(name: str) -> bool:
    """True for a key users may never set (``STARTUP_KEYS``), in any case."""
    return reader_of(name) is not None


def _reached_by_prefix(stem: str) -> str | None:
    """A start-up key (or family, ``GIT_*``) that keys starting ``stem`` could be, or None."""
    upper = stem.upper()
    for key in sorted(_READER):
        family = key[:-1] if key.endswith("*") else None
        if key.startswith(upper) or (family is not None and upper.startswith(family)):
            return key
    return None


def _named(key: str) -> str:
    return f"{key} keys" if key.endswith("*") else key


@dataclass(frozen=True)
class EnvRule:
    """One entry of ``user_env``: which keys it opens and what their values may be."""

    name: str  # a key, or a prefix ending in "_*"
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
    if name == "*":
        raise InvalidSpec(
            f"{where}.name: '*' would let users set any key, including keys runtimes read "
            "at start-up (PYTHONWARNINGS, BROWSER, GIT_*...); name the keys, or use a "
            "prefix in your own namespace such as 'APP_*'",
            field="user_env",
            key=name,
        )
    if name.endswith("*"):
        reached = _reached_by_prefix(stem)
        if reached is not None:
            raise InvalidSpec(
                f"{where}.name: {name} would let users set {_named(reached)} "
                f"({_READER[reached]} reads {'them' if reached.endswith('*') else 'it'} at "
                "start-up); users may never set such keys",
                field="user_env",
                key=name,
            )
        if not stem.endswith("_"):
            raise InvalidSpec(
                f"{where}.name: {name!r}: a prefix must end in '_*' (such as 'APP_*')",
                field="user_env",
                key=name,
            )
    elif is_denied(name):
        raise InvalidSpec(
            f"{where}.name: users may never set {name} (read by {reader_of(name)} at "
            "start-up: it changes how programs load or start)",
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


@dataclass(frozen=True)
class SplitRules:
    """``user_env`` as stored, split into the rules still allowed and the rest."""

    kept: list[Any]
    refused: list[dict[str, Any]]  # {"rule": as stored, "reason": why it is refused}
    usable: list[EnvRule]


def split_rules(user_env: Any) -> SplitRules:
    """Stored rules as the policy takes them today: a rule refused now (saved before the
    allow-list, or before the deny-list grew) opens nothing and is reported with the
    reason, instead of failing every request. Never raises."""
    if user_env in (None, "", []):
        return SplitRules(kept=[], refused=[], usable=[])
    if not isinstance(user_env, list):
        reason = "user_env: must be a list of keys or rules"
        return SplitRules(kept=[], refused=[{"rule": user_env, "reason": reason}], usable=[])
    kept: list[Any] = []
    refused: list[dict[str, Any]] = []
    usable: list[EnvRule] = []
    for index, raw in enumerate(user_env[:MAX_RULES]):
        try:
            usable.append(_rule(index, raw))
        except InvalidSpec as exc:
            refused.append({"rule": raw, "reason": exc.message})
        else:
            kept.append(raw)
    too_many = f"user_env: at most {MAX_RULES} rules"
    refused += [{"rule": raw, "reason": too_many} for raw in user_env[MAX_RULES:]]
    return SplitRules(kept=kept, refused=refused, usable=usable)


def removed_rules_note(removed: list[dict[str, Any]]) -> str:
    """What an operator reads about the rules an upgrade took out of ``user_env``
    (``SplitRules.refused`` as migration 0012 stored them)."""
    parts = [
        f"{note['rule']!r} ({note['reason']})"
        if isinstance(note.get("rule"), str)
        else f"{json.dumps(note.get('rule'))} ({note.get('reason')})"
        for note in removed
    ]
    return (
        "An upgrade removed from user_env the rules the env policy no longer allows: "
        f"{'; '.join(parts)}. Users can no longer set the keys they opened; name the keys "
        "users may set, or use a prefix of your own such as APP_*. Saving the template "
        "clears this note."
    )


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
    2. A start-up key (``STARTUP_KEYS``, any case) is refused whatever the rules say.
    3. A key the template sets needs a rule naming it exactly; any other key needs a
       rule that matches it. Stored rules the policy refuses today open nothing
       (``split_rules``).
    4. The value must fit the first matching rule's ``max_length`` and ``pattern``.
    """
    if overrides in (None, ""):
        return {}
    if not isinstance(overrides, Mapping):
        raise InvalidSpec("env: must be a mapping of NAME: value", field="env")
    if len(overrides) > MAX_USER_KEYS:
        raise InvalidSpec(f"env: at most {MAX_USER_KEYS} keys", field="env")
    parsed = split_rules(rules).usable
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
        reader = reader_of(key)
        if reader is not None:
            raise InvalidSpec(
                f"env.{key}: users may not set {key} (read by {reader} at start-up: it "
                "changes how programs load or start)",
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
