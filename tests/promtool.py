"""``promtool`` (Debian's ``prometheus`` package) for the tests: skipped where it is
missing, never in CI (``scripts/test-services.sh`` installs it there)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    if shutil.which("promtool") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing (scripts/test-services.sh installs it)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return subprocess.run(
        ["promtool", *args], input=stdin, capture_output=True, text=True, timeout=60
    )
