"""The job page's scripts in a real browser: the log poller stops and says so once the
session has ended, and the auto-refresh note is written by the script (without JavaScript
nothing refreshes, so the page itself does not claim it)."""

from __future__ import annotations

from playwright.sync_api import expect

from accounts.models import User
from jobs.choices import JobState
from tests.browser.conftest import Ui
from tests.factories import JobFactory

PERIOD_SECONDS = 0.2
QUIET_MS = int(PERIOD_SECONDS * 10 * 1000)


def _period(ui: Ui, seconds: float) -> None:
    ui.context.add_init_script(
        f"""
document.addEventListener("DOMContentLoaded", () => {{
  const main = document.querySelector("main[data-refresh-seconds]");
  if (main) main.dataset.refreshSeconds = "{seconds}";
}});
"""
    )


def test_the_log_poller_stops_and_says_so_when_the_session_has_ended(ui: Ui, owner: User) -> None:
    from django.contrib.sessions.models import Session

    job = JobFactory(owner=owner, state=JobState.RUNNING)
    _period(ui, PERIOD_SECONDS)
    ui.login("alice")
    ui.goto("jobs:detail", job_id=job.pk, step="running")
    region = ui.page.locator(".log-region")
    expect(region).to_contain_text("No logs yet", timeout=5_000)

    Session.objects.all().delete()
    expect(region).to_contain_text("Your session has ended", timeout=5_000)
    ui.shot("session-ended")
    logs_url = ui.url("jobs:logs-fragment", job_id=job.pk)
    after = len(ui.requests)
    ui.page.wait_for_timeout(QUIET_MS)
    polled = [url for url in ui.requests[after:] if url.startswith(logs_url)]
    assert polled == [], "the log poller went on after the session ended"
    assert "could not be loaded" not in region.inner_text()
    assert ui.js_errors == []


def test_the_refresh_note_is_written_by_the_script(ui: Ui, owner: User) -> None:
    _period(ui, 60)
    ui.login("alice")
    ui.goto("jobs:list", step="list")
    expect(ui.page.locator("[data-refresh-stamp]")).to_have_text("Refreshes every 60 s.")
    assert ui.js_errors == []
