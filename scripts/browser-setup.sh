#!/usr/bin/env bash
# Prepare the admin browser tests: Debian's chromium and the Playwright Python package.
#
# Idempotent. Installs the Debian `chromium` package only when /usr/bin/chromium is missing,
# and pip-installs `playwright` into the venv only when it cannot be imported. Never runs
# `playwright install`: the tests drive the system chromium (executable_path=/usr/bin/chromium)
# and nothing is downloaded from outside the package registries.
#
# Environment:
#   VENV   the virtualenv to install into (default .venv beside this script's parent)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
CHROMIUM=/usr/bin/chromium
export DEBIAN_FRONTEND=noninteractive

say() { printf '[browser-setup] %s\n' "$*"; }
die() { printf '[browser-setup] ERROR: %s\n' "$*" >&2; exit 1; }

# --- 1. chromium (Debian's package, not a Playwright download) -------------------------------
if [ -x "$CHROMIUM" ]; then
    say "chromium present: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
else
    [ "$(id -u)" -eq 0 ] || die "need root to apt-get install chromium"
    say "installing chromium"
    if ! apt-get install -y -q --no-install-recommends chromium fonts-liberation >/dev/null 2>&1; then
        say "apt-get update"
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends chromium fonts-liberation >/dev/null \
            || die "apt-get install chromium failed"
    fi
    [ -x "$CHROMIUM" ] || die "chromium installed but $CHROMIUM is missing"
    say "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
fi

# --- 2. playwright (the Python package only) -------------------------------------------------
[ -x "$VENV/bin/python" ] || die "no virtualenv at $VENV (run: make venv)"
if "$VENV/bin/python" -c "import playwright.sync_api" >/dev/null 2>&1; then
    say "playwright present"
else
    say "pip install playwright"
    "$VENV/bin/pip" install -q "playwright>=1.45,<2" || die "pip install playwright failed"
fi

# --- 3. smoke check: launch the system chromium headless through Playwright -------------------
"$VENV/bin/python" - <<'PY' || die "playwright could not launch $CHROMIUM"
from playwright.sync_api import sync_playwright

ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
    page = browser.new_page()
    page.set_content("<title>ok</title>")
    assert page.title() == "ok"
    browser.close()
print("[browser-setup] chromium launches through playwright: ok")
PY
say "ready"
