"""How the API server reads a query parameter that is a flag: ``true`` (the official
client writes Python's ``True``)."""

from __future__ import annotations

TRUE = ("true", "True", "1")
