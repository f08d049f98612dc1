"""Auto-refresh in a real browser: it stops when the session ends or the page stops changing,
and a slow server never has two refreshes of one page in flight.

The pages refresh every 10–15 s; each test makes that a fraction of a second by rewriting
`data-refresh-seconds` before gpulab.js reads it (an init script's DOMContentLoaded listener
runs before those of the page's deferred scripts).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils import timezone
from playwright.sync_api import Route, expect

from accounts.models import User
from jobs.choices import JobState
from jobs.models import Job
from tests.browser.conftest import Ui
from tests.factories import JobFactory

PERIOD_SECONDS = 0.2
FAST_REFRESH = f"""
document.addEventListener("DOMContentLoaded", () => {{
  const main = document.querySelector("main[data-refresh-seconds]");
  if (main) main.dataset.refreshSeconds = "{PERIOD_SECONDS}";
}});
"""
# Ten periods: long enough that a refresh that was still going would have shown up.
QUIET_MS = int(PERIOD_SECONDS * 10 * 1000)


def _fast(ui: Ui) -> None:
    ui.context.add_init_script(FAST_REFRESH)


def _requests_to(ui: Ui, url: str) -> int:
    return sum(1 for seen in ui.requests if seen == url)


def test_refresh_stops_and_says_so_when_the_session_has_ended(ui: Ui, owner: User) -> None:
    from django.contrib.sessions.models import Session

    _fast(ui)
    ui.login("alice")
    ui.goto("jobs:list", step="live")
    stamp = ui.page.locator("[data-refresh-stamp]")
    expect(stamp).to_contain_text("Updated", timeout=5_000)

    # Logged out elsewhere (or the session expired): the next fetch lands on /login/.
    Session.objects.all().delete()
    expect(stamp).to_have_text("Session ended — reload to log in", timeout=5_000)
    expect(ui.page.locator("[data-refresh-status]")).to_have_text(
        "Session ended; auto-refresh stopped. Reload to log in."
    )
    ui.shot("session-ended")

    after = len(ui.requests)
    ui.page.wait_for_timeout(QUIET_MS)
    assert ui.requests[after:] == [], "auto-refresh went on after the session ended"
    assert ui.js_errors == []


def test_a_job_page_stops_refreshing_once_the_job_has_finished(ui: Ui, owner: User) -> None:
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    _fast(ui)
    ui.login("alice")
    ui.goto("jobs:detail", job_id=job.pk, step="running")
    page_url = ui.url("jobs:detail", job_id=job.pk)
    expect(ui.page.locator("[data-refresh-stamp]")).to_contain_text("Updated", timeout=5_000)

    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    # The next refresh brings the finished page, which no longer asks to be refreshed.
    expect(ui.page.locator('[data-refresh-id="job-facts"]')).to_contain_text(
        "Succeeded", timeout=5_000
    )
    ui.shot("finished")

    fetched = _requests_to(ui, page_url)
    ui.page.wait_for_timeout(QUIET_MS)
    assert _requests_to(ui, page_url) == fetched, "the finished job's page is still re-fetched"
    assert ui.js_errors == []


def test_a_slow_server_never_has_two_refreshes_in_flight(ui: Ui, owner: User) -> None:
    _fast(ui)
    ui.login("alice")
    ui.goto("jobs:list", step="live")
    page_url = ui.url("jobs:list")

    # Hold every refresh until the test lets it through: the server "takes" that long.
    held: list[Route] = []

    def hold(route: Route) -> None:
        if route.request.headers.get("x-refresh"):
            held.append(route)
        else:
            route.continue_()

    ui.page.route(page_url, hold)
    for _ in range(3):
        ui.page.wait_for_timeout(QUIET_MS)
        assert len(held) == 1, f"{len(held)} refreshes in flight at once"
        held.pop().continue_()
        # Released: once it settles, the next one comes, and is the only one again.
        ui.page.wait_for_function(
            "() => /Updated/.test(document.querySelector('[data-refresh-stamp]').textContent)"
        )
    ui.page.unroute(page_url)
    for route in held:
        route.continue_()
    assert ui.js_errors == []


# Every text written to the spoken status region, in order (a MutationObserver's record).
LISTEN = """() => {
  window.saidAloud = [];
  const status = document.querySelector("[data-refresh-status]");
  new MutationObserver(() => window.saidAloud.push(status.textContent))
    .observe(status, {childList: true, characterData: true, subtree: true});
}"""


def _refreshes(ui: Ui, url: str, at_least: int) -> None:
    """Wait (in quiet periods) until the page was re-fetched `at_least` more times."""
    before = _requests_to(ui, url)
    for _ in range(20):
        ui.page.wait_for_timeout(QUIET_MS // 2)
        if _requests_to(ui, url) >= before + at_least:
            return
    raise AssertionError(f"{url} was re-fetched fewer than {at_least} times")


def test_the_status_region_speaks_when_the_job_changes_state_and_never_on_a_plain_tick(
    ui: Ui, owner: User
) -> None:
    job = JobFactory(owner=owner, state=JobState.PENDING)
    _fast(ui)
    ui.login("alice")
    ui.goto("jobs:detail", job_id=job.pk, step="pending")
    page_url = ui.url("jobs:detail", job_id=job.pk)
    status = ui.page.locator('.refresh-bar [role="status"][data-refresh-status]')
    assert status.count() == 1
    ui.page.evaluate(LISTEN)

    _refreshes(ui, page_url, at_least=3)
    assert "Updated" in ui.page.locator("[data-refresh-stamp]").inner_text()
    assert ui.page.evaluate("window.saidAloud") == [], "a tick with no news was announced"

    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    expect(status).to_have_text(f"Job #{job.pk}: Running.", timeout=5_000)
    _refreshes(ui, page_url, at_least=3)
    assert ui.page.evaluate("window.saidAloud") == [f"Job #{job.pk}: Running."]

    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    expect(status).to_have_text(
        f"Job #{job.pk}: Succeeded. This page no longer changes; auto-refresh stopped.",
        timeout=5_000,
    )
    assert len(ui.page.evaluate("window.saidAloud")) == 2
    assert ui.js_errors == []


def test_the_stamp_is_in_the_labs_time_zone_on_a_24_hour_clock(
    ui: Ui, owner: User, settings
) -> None:
    # Not the browser's zone (the machine's) nor its 12-hour clock: the pages' times are the
    # lab's. 15:04:05 UTC is 20:34:05 in Kolkata (+05:30), a zone no test machine runs in
    # by accident together with a half-hour offset.
    settings.TIME_ZONE = "Asia/Kolkata"
    ui.page.clock.set_fixed_time(datetime(2026, 3, 1, 15, 4, 5, tzinfo=UTC))
    _fast(ui)
    ui.login("alice")
    ui.goto("jobs:list", step="live")

    assert ui.page.locator("body").get_attribute("data-time-zone") == "Asia/Kolkata"
    expect(ui.page.locator("[data-refresh-stamp]")).to_have_text(
        "Updated 20:34:05 Asia/Kolkata", timeout=5_000
    )
    assert ui.js_errors == []


def test_an_open_details_stays_open_when_its_region_is_refreshed(
    ui: Ui, owner: User, small_cluster
) -> None:
    _fast(ui)
    ui.login("alice")
    ui.goto("dashboard:queue", step="queue")
    page_url = ui.url("dashboard:queue")
    details = ui.page.locator('[data-refresh-id="queue-waits-summary"] details')
    # Opened as a reader would, then left: the region holds neither focus nor a selection.
    details.locator("summary").click()
    ui.page.locator("h1").click()
    assert details.evaluate("el => el.open")

    # The region's numbers change, so it is swapped.
    JobFactory(owner=owner, queue_position=1, pending_since=timezone.now())
    expect(ui.page.locator('[data-refresh-id="queue-waits-summary"] p')).to_contain_text(
        "1 is waiting now", timeout=5_000
    )
    _refreshes(ui, page_url, at_least=2)
    assert details.evaluate("el => el.open"), "the refresh closed what the reader opened"
