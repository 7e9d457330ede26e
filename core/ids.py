"""Reading a database id from user input (URLs, query parameters, command lines)."""

from __future__ import annotations

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
