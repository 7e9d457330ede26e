"""Image references: ``[registry[:port]/]name[:tag][@digest]``, validated without regex
backtracking (the length is checked first; each pattern is one bounded character class)."""

from __future__ import annotations

import re
from typing import Any

from containers.errors import InvalidSpec

_DIGEST = re.compile(r"[a-z0-9]{1,32}:[0-9a-fA-F]{32,128}")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}")
_COMPONENT = re.compile(r"[a-z0-9._-]{1,255}")
_SEPARATORS = re.compile(r"[._-]{1,255}")


def clean_image(image: Any) -> str:
    """An image reference (``[registry[:port]/]name[:tag][@digest]``), or InvalidSpec.

    Checked by splitting, length first; every pattern is a single bounded class.
    """
    if not isinstance(image, str) or not 0 < len(image) <= 255 or not image.isascii():
        raise InvalidSpec(
            "image: must be an image reference of at most 255 characters", field="image"
        )
    problem = _image_problem(image)
    if problem:
        raise InvalidSpec(f"image: {image!r} is not an image reference ({problem})", field="image")
    return image


def _image_problem(image: str) -> str | None:
    name, at, digest = image.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return "bad digest"
    parts = name.split("/")
    last, colon, tag = parts[-1].partition(":")
    if colon and not _TAG.fullmatch(tag):
        return "bad tag"
    parts[-1] = last
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        host, _, port = parts.pop(0).partition(":")
        if (
            not _HOST.fullmatch(host)
            or host.startswith(("-", "."))
            or (port and not (port.isdigit() and 0 < int(port) < 65536))
        ):
            return "bad registry host"
    for component in parts:
        if not _COMPONENT.fullmatch(component) or not (
            component[0].isalnum() and component[-1].isalnum()
        ):
            return "bad name"
        for separator in _SEPARATORS.findall(component):
            if separator not in (".", "_", "__") and set(separator) != {"-"}:
                return "bad name"
    return None
