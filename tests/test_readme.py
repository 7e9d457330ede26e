"""The README stays true: its two set-up commands, and every manage.py command listed."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_the_readme_sets_up_with_exactly_make_run_and_make_test():
    section = README.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make run", "make test"]


def test_the_readme_lists_every_manage_py_command():
    commands = sorted(
        path.stem
        for path in REPO.glob("*/management/commands/*.py")
        if not path.stem.startswith("_") and ".venv" not in path.parts
    )
    assert commands, "no commands found"
    missing = [name for name in commands if f"`{name}" not in README]
    assert not missing, f"README.md does not list: {', '.join(missing)}"
