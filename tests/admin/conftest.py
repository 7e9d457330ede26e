"""Admin fixtures: the four kinds of user the permissions matrix names."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

from tests.factories import UserFactory

PASSWORD = "console-pass-1"
OPERATED = {
    "containers": ("containerinstance", "containertemplate", "runtime"),
    "outbox": ("outboxevent",),
}
WATCHED = {
    "containers": (
        "containerinstance",
        "containertemplate",
        "runtime",
        "containerevent",
        "runtimeevent",
        "orphancontainer",
    ),
    "outbox": ("outboxevent",),
}


def _perms(actions: tuple[str, ...], models: dict[str, tuple[str, ...]]) -> list[Permission]:
    codenames = [f"{a}_{m}" for ms in models.values() for m in ms for a in actions]
    perms = list(
        Permission.objects.filter(content_type__app_label__in=list(models), codename__in=codenames)
    )
    assert len(perms) == len(codenames), "a permission the console relies on is missing"
    return perms


def make_user(username: str, *, staff: bool = True, superuser: bool = False, perms=()):
    user = UserFactory(username=username, is_staff=staff, is_superuser=superuser)
    user.set_password(PASSWORD)
    user.save()
    user.user_permissions.set(perms)
    return user


@pytest.fixture
def superuser(db):
    return make_user("root", superuser=True)


@pytest.fixture
def operator(db):
    """Staff who may operate: change (and add) where it matters, view everywhere."""
    perms = _perms(("view",), WATCHED) + _perms(("change",), OPERATED)
    perms += _perms(("add",), {"containers": ("containerinstance", "containertemplate")})
    return make_user("operator", perms=perms)


@pytest.fixture
def viewer(db):
    """Staff who may only look."""
    return make_user("viewer", perms=_perms(("view",), WATCHED))


@pytest.fixture
def outsider(db):
    """Logged in, but not staff."""
    return make_user("outsider", staff=False)


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


# --- the browser (Playwright driving Debian's chromium) ---------------------------------------

IN_CI = os.environ.get("CI", "").lower() == "true"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# Only the live server is reachable: anything else the page asks for is refused.
OFF_SITE = re.compile(r"^(?!https?://(localhost|127\.0\.0\.1)[:/])")


def unavailable(reason: str) -> None:
    """Skip, or fail when CI=true: CI must run every test."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        unavailable("no chromium: run scripts/browser-setup.sh")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("no playwright: run scripts/browser-setup.sh")
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests
    # make between page steps are still synchronous.
    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
    finally:
        if saved is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


class Shots:
    """Numbered full-page screenshots in test-artifacts/<test name>/."""

    def __init__(self, page, name: str) -> None:
        self.page = page
        self.folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.count = 0

    def __call__(self, label: str) -> Path:
        self.count += 1
        path = self.folder / f"{self.count:02d}-{label}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    context.route(OFF_SITE, lambda route: route.abort())
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.shots = Shots(page, request.node.name)
    yield page
    try:
        page.shots("last")
    finally:
        context.close()


@pytest.fixture
def admin_login(live_server):
    """Log ``user`` in through the admin's login form."""

    def login(page, user):
        page.goto(f"{live_server.url}/admin/login/?next=/admin/")
        page.fill("#id_username", user.get_username())
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(f"{live_server.url}/admin/")
        return page

    return login
