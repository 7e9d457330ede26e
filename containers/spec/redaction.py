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
    "env_for",
    "error_for",
    "scrub",
    "sees_hosts",
    "sees_secrets",
    "spec_for",
    "template_for",
]
