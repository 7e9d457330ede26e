"""What the reconciler reads of ``GOBRAVE["container"]``."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def _config() -> dict[str, Any]:
    return settings.GOBRAVE["container"]
