"""``ConfigError`` and the validators of one value each (booleans, bounded numbers and
durations, choices, texts, rates, tokens, the broker), and of a nested mapping
(``_nested``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """config.yml (or an override) is invalid; the message names the key."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError("must be true or false")


def _integer(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be a whole number between {low} and {high}")
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")
        return value

    return check


def _duration(low: float, high: float) -> Callable[[Any], float]:
    """Seconds as a number, or a string such as ``500ms``, ``30s``, ``5m``, ``7d``."""

    def check(value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError("must be a duration such as 30, '30s', '5m' or '7d'")
        if isinstance(value, int | float):
            seconds = float(value)
        elif isinstance(value, str) and (match := _DURATION.match(value)):
            seconds = float(match.group(1)) * _UNITS[match.group(2)]
        else:
            raise ValueError("must be a duration such as 30, '30s', '5m' or '7d'")
        if not low <= seconds <= high:
            raise ValueError(f"must be between {low:g}s and {high:g}s, got {seconds:g}s")
        return seconds

    return check


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return check


def _optional(inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)

    return check


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _label(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", value):
        raise ValueError("must be 1-63 letters, digits, '.', '_' or '-'")
    return value


def _absolute_paths(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise ValueError("must be a list of paths")
    return [str(Path(p)) for p in value]


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$")


def _rate(value: Any) -> str:
    """A DRF throttle rate such as ``1000/minute`` (at least 1 request per period)."""
    if isinstance(value, str) and (match := _RATE.match(value)) and int(match.group(1)) >= 1:
        return f"{int(match.group(1))}/{match.group(2)}"
    raise ValueError(f"must be a rate such as '1000/minute' or empty (off), got {value!r}")


def _token(value: Any) -> str:
    if not isinstance(value, str) or len(value) < 16 or not value.isprintable() or " " in value:
        raise ValueError("must be a string of at least 16 printable characters without spaces")
    return value


def _broker(value: Any) -> str:
    if value == "orm" or (isinstance(value, str) and re.match(r"^rediss?://", value)):
        return value
    raise ValueError(f"must be 'orm' or a redis:// URL, got {value!r}")


def _number(low: float, high: float) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a number between {low:g} and {high:g}")
        if not low <= value <= high:
            raise ValueError(f"must be between {low:g} and {high:g}, got {value}")
        return float(value)

    return check


def _nested(schema: dict[str, tuple[Callable[[Any], Any], Any]], where: str):
    """A mapping validated key by key against ``schema`` (defaults filled in)."""

    def check(value: Any) -> dict[str, Any]:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ValueError("must be a mapping")
        unknown = sorted(set(value) - set(schema))
        if unknown:
            raise ConfigError(f"unknown key {where}.{unknown[0]}")
        result = {}
        for key, (validate, default) in schema.items():
            try:
                result[key] = validate(value[key]) if key in value else default
            except ValueError as exc:
                raise ConfigError(f"{where}.{key}: {exc}") from None
        return result

    return check
