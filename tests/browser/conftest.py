"""Browser tests: Playwright drives Debian's Chromium against pytest-django's live server.

No browser is ever downloaded (`playwright install` is never run): Chromium is the system's
`/usr/bin/chromium`, which `make test` installs with apt-get when missing. Without it the
browser tests skip with a reason on a developer's machine; with `CI=true` they run and fail
loudly, so a CI image that lost its Chromium cannot go green by skipping them.

Every test here gets the `browser` marker (select them with `-m browser`, leave them out with
`-m "not browser"`), a live server on PostgreSQL with committed data (`transactional_db`:
the server thread must see what the test wrote) and a `ui` fixture: a fresh browser context
that logs in through the real form, screenshots each page it visits into
`artifacts/screenshots/<test>-<step>.png`, records every network request and every
uncaught JavaScript error, and checks horizontal overflow at a given viewport width.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.urls import reverse

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Response

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
# Another build (e.g. Ubuntu's /usr/bin/chromium-browser) may be named with GPULAB_CHROMIUM.
CHROMIUM = Path(os.environ.get("GPULAB_CHROMIUM") or "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    # Containers and CI runners usually run as root without user namespaces.
    "--no-sandbox",
    "--disable-gpu",
    # /dev/shm is 64 MB in Docker; Chromium then crashes on big pages.
    "--disable-dev-shm-usage",
    # No update checks or field trials: the only traffic is the page's own.
    "--disable-background-networking",
]
# The personas of tests/conftest.py log in with these (their fixtures set them).
PASSWORDS = {
    "alice": "pw-alice-123",
    "bob": "pw-bob-123",
    "carol": "pw-carol-123",
    "root": "pw-root-123",
}
# The machine is shared and small: generous, but a hung page still fails in bounded time.
TIMEOUT_MS = 20_000
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


def _in_ci() -> bool:
    return settings.STRICT_SERVICES


def _missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (`make test` installs Debian's chromium with apt-get)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is missing (pip install -r requirements-dev.txt)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees every collected item of the session, not only this folder's.
    here = Path(__file__).resolve().parent
    reason = None if _in_ci() else _missing_reason()
    for item in items:
        if here not in Path(item.path).resolve().parents:
            continue
        item.add_marker(pytest.mark.browser)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"browser test skipped: {reason}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[Any]:
    # Keep each phase's report on the item, so `ui` can screenshot a failing page.
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    """One Chromium for the whole session (starting it costs about a second)."""
    reason = _missing_reason()
    if reason:
        # Only reachable with CI=true (otherwise the tests were skipped at collection).
        pytest.fail(f"CI=true and the browser tests cannot run: {reason}", pytrace=False)
    # Playwright's sync API runs an asyncio loop in this thread, and Django then refuses ORM
    # calls from the test body ("cannot call this from an async context"). The calls really
    # are synchronous here, which is what this switch is for.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


@dataclass
class Ui:
    """One browser context of one test, with the helpers the tests share."""

    context: BrowserContext = field(repr=False)
    page: Page = field(repr=False)
    base_url: str
    test_name: str
    requests: list[str] = field(default_factory=list, repr=False)
    js_errors: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list, repr=False)

    def url(self, target: str, *args: object, **kwargs: object) -> str:
        """A URL name ("dashboard:queue", reversed with args/kwargs) or a path ("/admin/")."""
        path = target if target.startswith("/") else reverse(target, args=args, kwargs=kwargs)
        return self.base_url + path

    def goto(
        self, target: str, *args: object, step: str | None = None, **kwargs: object
    ) -> Response:
        """Open a page, wait until it settled, screenshot it as <test>-<step>.png."""
        response = self.page.goto(self.url(target, *args, **kwargs), wait_until="load")
        assert response is not None, f"no response for {target}"
        self.shot(step or _safe_name(target.replace(":", "-")))
        return response

    def shot(self, step: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{self.test_name}-{_safe_name(step)}.png"
        self.page.screenshot(path=str(path), full_page=True)
        self.screenshots.append(path)
        return path

    def login(self, username: str, password: str | None = None) -> None:
        """Log in through the real form at /login/, as a person would.

        Not screenshotted: every test passes through it (test_pages shoots it on its own).
        """
        self.page.goto(self.url("/login/"))
        self.page.get_by_label("User name").fill(username)
        self.page.get_by_label("Password").fill(password or PASSWORDS[username])
        with self.page.expect_navigation():
            self.page.get_by_role("button", name="Log in").click()
        assert "/login/" not in self.page.url, f"login as {username} failed: still on the form"
        assert self.page.locator("header .who").inner_text().startswith(username)

    def set_width(self, width: int) -> None:
        height = PHONE["height"] if width <= PHONE["width"] else DESKTOP["height"]
        self.page.set_viewport_size({"width": width, "height": height})

    def horizontal_overflow(self) -> dict[str, Any]:
        """The page's scroll width against the viewport, and the widest offenders if any."""
        return self.page.evaluate(
            """() => {
              const viewport = window.innerWidth;
              const offenders = [];
              for (const el of document.querySelectorAll("body *")) {
                const box = el.getBoundingClientRect();
                if (box.right > viewport + 1 && !el.closest(".table-wrap")) {
                  const id = el.id ? "#" + el.id : "";
                  const cls = el.classList.length ? "." + [...el.classList].join(".") : "";
                  const right = Math.round(box.right);
                  offenders.push(`${el.tagName.toLowerCase()}${id}${cls} right=${right}`);
                }
              }
              return {
                scrollWidth: document.documentElement.scrollWidth,
                innerWidth: viewport,
                offenders: offenders.slice(0, 8),
              };
            }"""
        )

    def assert_no_horizontal_overflow(self, width: int) -> None:
        """At `width` px, the page itself never scrolls sideways (tables scroll in .table-wrap)."""
        assert self.page.viewport_size and self.page.viewport_size["width"] == width
        found = self.horizontal_overflow()
        assert found["scrollWidth"] <= found["innerWidth"] + 1, (
            f"{self.page.url} overflows at {width} px: scrollWidth {found['scrollWidth']} > "
            f"{found['innerWidth']}; elements past the right edge: {found['offenders']}"
        )

    def external_requests(self) -> list[str]:
        """Every request this context made that did not go to the live server's machine."""
        return [
            url
            for url in self.requests
            if urlsplit(url).scheme not in ("data", "blob", "about")
            and urlsplit(url).hostname not in LOCAL_HOSTS
        ]


@pytest.fixture
def ui(chromium: Browser, live_server: Any, request: pytest.FixtureRequest) -> Iterator[Ui]:
    """A fresh context (own cookies) at 1280 × 900; screenshots a failing page as `failure`."""
    context = chromium.new_context(viewport=DESKTOP, base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    # Screenshots of an earlier run of this test would mix with this run's.
    for stale in SCREENSHOTS.glob(f"{_safe_name(request.node.name)}-*.png"):
        stale.unlink()
    helper = Ui(
        context=context,
        page=page,
        base_url=live_server.url,
        test_name=_safe_name(request.node.name),
    )
    context.on("request", lambda req: helper.requests.append(req.url))
    page.on("pageerror", lambda error: helper.js_errors.append(str(error)))
    yield helper
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        # A crashed page must not hide the real failure behind a screenshot error.
        with contextlib.suppress(Exception):
            helper.shot("failure")
    # Closed before the database is flushed: auto-refreshing pages stop hitting the server.
    context.close()
