"""Reading a database id from user input (URLs, query parameters, command lines)."""

from __future__ import annotations

import re

BIGINT_MAX = 2**63 - 1


def db_id(ref: object) -> int | None:
    """``ref`` as a bigint id when it is a plain decimal number in range, else None.

    Never raises and never lets a value reach the database that would make it raise
    (letters, signs, Unicode digits, numbers past bigint).
    """
    text = str(ref)
    if text.isascii() and text.isdigit() and int(text) <= BIGINT_MAX:
        return int(text)
    return None


SHORT_ID_LENGTH = 8  # the admin's and the CLI's short id: the uuid's first 8 hex digits

_HEX_PREFIX = re.compile(rf"[0-9a-f]{{{SHORT_ID_LENGTH},32}}")


def uuid_prefix(text: str) -> str | None:
    """``text`` as the start of a canonical uuid string (dashes where uuids have them), or
    None when it is not at least ``SHORT_ID_LENGTH`` hex digits (dashes optional, any case).

    The one id form of the API, the CLI and the admin's search: each looks rows up with
    ``id__startswith=uuid_prefix(text)``.
    """
    digits = str(text).strip().lower().replace("-", "")
    if not _HEX_PREFIX.fullmatch(digits):
        return None
    groups, start = [], 0
    for size in (8, 4, 4, 4, 12):
        if start < len(digits):
            groups.append(digits[start : start + size])
        start += size
    return "-".join(groups)
