"""What users never see (contract §8): secret env values, host paths, engine addresses.

Operators are trusted; users are not. Two permissions draw the line, the same in the API
and the admin:
- ``containers.change_containertemplate`` (who writes templates) sees the values of the
  env keys a template marks secret (``ContainerTemplate.secret_env``, carried on each
  instance's spec); everyone else sees ``env_policy.SECRET_PLACEHOLDER``.
- ``containers.view_runtime`` (who sees the engines) sees host paths and engine addresses;
  for everyone else they are taken out of specs, templates, histories and error texts,
  and a refused volume names only which volume of the template it was.
Pure functions over plain data; nothing here reads or writes rows, except for the list of
engine addresses to hide.

Logs are the one place a secret can reach a user through the program itself (an
operator's command that prints its env): ``LogScrubber`` replaces the instance's secret
values in its output for everyone without ``SEE_SECRETS``. A safety net, not a guarantee:
a program can print a value transformed (encoded, split by other output, reversed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from containers.spec.env_policy import SECRET_PLACEHOLDER, redacted

SEE_SECRETS = "containers.change_containertemplate"
SEE_HOSTS = "containers.view_runtime"
HIDDEN_PATH = "<host path>"
HIDDEN_ENGINE = "<engine>"
_ENGINE_URL = re.compile(r"\b(?:unix|tcp|ssh|npipe|https?|fake)://[^\s'\"),]*")
# Paths on the engine's host that say where its data lives (mount sources are handled
# by name; these catch them inside free text such as an engine's error message).
_HOST_PREFIXES = ("/var/lib/docker", "/var/run/docker", "/run/docker", "/var/run/", "/run/")
_VOLUME_FIELD = re.compile(r"^volumes\[(\d+)\]")


def sees_secrets(user) -> bool:
    return user is not None and user.has_perm(SEE_SECRETS)


def sees_hosts(user) -> bool:
    return user is not None and user.has_perm(SEE_HOSTS)


def _host_roots() -> list[str]:
    config = settings.GOBRAVE["container"]
    roots = [config["workspace_root"], *config["allowed_volume_roots"], *_HOST_PREFIXES]
    return sorted({root.rstrip("/") or "/" for root in roots if root}, key=len, reverse=True)


_host_patterns: dict[tuple[str, ...], list[re.Pattern]] = {}


def _host_paths() -> list[re.Pattern]:
    """One compiled pattern per host root, longest root first, for the roots the settings
    name now (compiled once per set of roots: ``scrub`` runs on every string of a spec)."""
    roots = tuple(_host_roots())
    if roots not in _host_patterns:
        _host_patterns[roots] = [
            re.compile(rf"{re.escape(root)}(?=/|\b|$)[^\s'\"),:]*") for root in roots
        ]
    return _host_patterns[roots]


def scrub(text: str) -> str:
    """``text`` with engine addresses and host paths replaced by placeholders."""
    if not text:
        return text
    text = _ENGINE_URL.sub(HIDDEN_ENGINE, text)
    for pattern in _host_paths():
        text = pattern.sub(HIDDEN_PATH, text)
    return text


def scrub_data(value: Any) -> Any:
    """``scrub`` applied to every string in a JSON value."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {key: scrub_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub_data(item) for item in value]
    return value


def env_for(user, env: dict[str, str], secret: Iterable[str]) -> dict[str, str]:
    shown = env if sees_secrets(user) else redacted(env, secret)
    return shown if sees_hosts(user) else scrub_data(shown)


def spec_for(user, spec: dict[str, Any]) -> dict[str, Any]:
    """An instance's stored spec as ``user`` may see it."""
    if not spec:
        return spec
    shown = dict(spec)
    if "env" in shown:
        shown["env"] = env_for(user, shown["env"] or {}, spec.get("secret_env") or ())
    if not sees_hosts(user):
        shown["mounts"] = [
            {"target": m.get("target"), "read_only": m.get("read_only", False)}
            for m in spec.get("mounts") or []
        ]
        shown = {
            key: (value if key == "mounts" else scrub_data(value)) for key, value in shown.items()
        }
    return shown


def template_for(user, data: dict[str, Any]) -> dict[str, Any]:
    """A rendered template (``TemplateOutputSerializer``) as ``user`` may see it."""
    shown = dict(data)
    if "env" in shown:
        shown["env"] = env_for(user, shown["env"] or {}, data.get("secret_env") or ())
    if not sees_hosts(user) and "volumes" in shown:
        shown["volumes"] = [
            {"target": v.get("target"), "read_only": v.get("read_only", False)}
            if isinstance(v, dict)
            else {"target": None, "read_only": False}
            for v in shown["volumes"] or []
        ]
    return shown


def dag_nodes_for(
    user, nodes: list[dict[str, Any]], secret_env: dict[int, Iterable[str]]
) -> list[dict[str, Any]]:
    """A DAG template's nodes as ``user`` may see them: each node's env goes through
    ``env_for`` with the ``secret_env`` of the node's container template (``secret_env``
    maps template ids to it; a node whose template is not in it hides every value)."""
    shown = []
    for node in nodes or []:
        node = dict(node)
        if "env" in node:
            env = node["env"] or {}
            secret = secret_env.get(_int_or_none(node.get("template")), env.keys())  # type: ignore[arg-type]
            node["env"] = env_for(user, env, secret)
        shown.append(node)
    return shown


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


MIN_SCRUBBED = 3  # shorter values would hide ordinary output (``on``, ``1``) and little else


class LogScrubber:
    """Replaces secret values in a text that arrives in chunks (a container's output).

    ``feed(chunk)`` returns what is safe to emit now; ``flush()`` what is left at the end.
    Between chunks it holds back as many characters as the longest value less one, so a
    value split across chunks is still caught. Values shorter than ``MIN_SCRUBBED`` are
    left alone. Pure; one scrubber per stream.
    """

    def __init__(self, values: Iterable[str]) -> None:
        wanted = sorted({v for v in values if len(v) >= MIN_SCRUBBED}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, wanted))) if wanted else None
        self._hold = len(wanted[0]) - 1 if wanted else 0
        self._pending = ""

    def feed(self, chunk: str) -> str:
        if self._pattern is None:
            return chunk
        text = self._pending + chunk
        # A value starting before ``safe`` lies wholly inside ``text``: what is scanned
        # there is final. Anything from ``safe`` on may be the start of a value.
        safe = len(text) - self._hold
        out, at = [], 0
        for match in self._pattern.finditer(text):
            if match.start() >= safe:
                break
            out += [text[at : match.start()], SECRET_PLACEHOLDER]
            at = match.end()
        cut = max(at, safe)
        out.append(text[at:cut])
        self._pending = text[cut:]
        return "".join(out)

    def flush(self) -> str:
        text, self._pending = self._pending, ""
        return self._pattern.sub(SECRET_PLACEHOLDER, text) if self._pattern else text


def secret_values(spec: dict[str, Any]) -> list[str]:
    """The values of an instance's secret env keys, from its stored spec."""
    env = (spec or {}).get("env") or {}
    return [str(env[k]) for k in (spec or {}).get("secret_env") or () if env.get(k)]


def logs_for(user, spec: dict[str, Any], text: str) -> str:
    """An instance's output as ``user`` may see it (``LogScrubber``)."""
    if sees_secrets(user):
        return text
    scrubber = LogScrubber(secret_values(spec))
    return scrubber.feed(text) + scrubber.flush()


def error_for(user, message: str, details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A domain error's message and details as ``user`` may see them.

    A refused volume (its field is ``volumes[N]...``) tells a user only which volume of
    the template it was; any other text loses its host paths and engine addresses. The
    field that was wrong is always named.
    """
    if sees_hosts(user):
        return message, details
    field = str(details.get("field") or "")
    match = _VOLUME_FIELD.match(field) or _VOLUME_FIELD.match(message)
    if match:
        index = match.group(1)
        return (
            f"volumes[{index}]: volume {index} of the template was refused; an operator can "
            "see why in the logs",
            {"field": f"volumes[{index}]"},
        )
    return scrub(message), scrub_data(details)


__all__ = [
    "SECRET_PLACEHOLDER",
    "LogScrubber",
    "dag_nodes_for",
    "env_for",
    "error_for",
    "logs_for",
    "scrub",
    "secret_values",
    "sees_hosts",
    "sees_secrets",
    "spec_for",
    "template_for",
]
