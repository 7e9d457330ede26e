"""``$VAR`` and ``${VAR}`` expanded in a template's values (``expand``)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from containers.errors import InvalidSpec

_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand(text: str, variables: Mapping[str, str], *, strict: bool, where: str) -> str:
    """Replace ``$VAR`` and ``${VAR}`` with their values; ``$$`` is a literal ``$``.

    Unknown variables are left as written (for the container's own shell), or refused
    with their name when ``strict``.
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(1):
            return "$"
        name = match.group(2) or match.group(3)
        if name in variables:
            return variables[name]
        if strict:
            raise InvalidSpec(f"{where}: unknown variable ${name}", field=where, variable=name)
        return match.group(0)

    return _VAR.sub(replace, text)
