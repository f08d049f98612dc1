"""What auto-refresh swaps, in a real browser: a region that comes and goes (the idle
warning), a region holding a drop-down nobody touched (the Keep choice), a region holding
a refused form's error (kept until submitted again), a region the fresh page lacks
(emptied), and charts that start empty (filled once there is data).

Refreshes are made a fraction of a second, as in test_auto_refresh.py.
"""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import Route, expect

from accounts.models import User
from cluster.choices import NodeState
from cluster.models import Node
from jobs.choices import JobState
from jobs.models import Job
from tests.browser.conftest import Ui
from tests.browser.test_auto_refresh import _fast, _refreshes
from tests.factories import JobFactory
from tests.scheduler.livefixtures import configure


@pytest.fixture
def reaping(transactional_db: None) -> None:
    configure(idle_reap=True, idle_threshold_pct=5.0, idle_window_minutes=60, idle_grace_minutes=30)


def test_an_idle_warning_comes_and_goes_with_the_refresh(ui: Ui, owner: User, reaping) -> None:
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    _fast(ui)
    ui.login("alice")
    ui.goto("jobs:detail", job_id=job.pk, step="not-warned")
    region = ui.page.locator('[data-refresh-id="job-idle"]')
    expect(region).to_have_text("")

    Job.objects.filter(pk=job.pk).update(idle_warned_at=timezone.now())
    expect(region.locator('[role="alert"]')).to_contain_text(
        "Idle: this job will be cancelled", timeout=5_000
    )
    ui.shot("warned")

    # Used again: the sweep lifts the warning, and the page says nothing of it any more.
    Job.objects.filter(pk=job.pk).update(idle_warned_at=None)
    expect(region.locator('[role="alert"]')).to_have_count(0, timeout=5_000)
    assert ui.js_errors == []


STRIP_DEFAULT = """() => {
  // As the page was before it marked a default: no option carries `selected`.
  document.querySelectorAll("#keep-hours option").forEach((o) => o.removeAttribute("selected"));
}"""


@pytest.mark.parametrize("marked_default", [True, False], ids=["as-served", "no-selected-attr"])
def test_the_actions_refresh_after_the_job_ends_for_a_viewer_offered_keep(
    ui: Ui, owner: User, lab_admin: User, reaping, marked_default: bool
) -> None:
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    _fast(ui)
    ui.login("root")
    ui.goto("jobs:detail", job_id=job.pk, step="running")
    actions = ui.page.locator('[data-refresh-id="job-actions"]')
    expect(actions.locator("#keep-hours")).to_have_count(1)
    expect(actions).to_contain_text("Cancel job")
    if not marked_default:
        ui.page.evaluate(STRIP_DEFAULT)
    assert actions.locator("#keep-hours").evaluate("el => el.selectedIndex") == 0
    expect(ui.page.locator("[data-refresh-stamp]")).to_contain_text("Updated", timeout=5_000)

    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    expect(ui.page.locator('[data-refresh-id="job-facts"]')).to_contain_text(
        "Succeeded", timeout=5_000
    )
    ui.shot("finished")
    expect(actions.locator("#keep-hours")).to_have_count(0)
    expect(actions).not_to_contain_text("Cancel job")
    assert ui.js_errors == []


def test_a_chosen_keep_duration_is_not_taken_away_by_a_refresh(
    ui: Ui, owner: User, lab_admin: User, reaping
) -> None:
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    _fast(ui)
    ui.login("root")
    ui.goto("jobs:detail", job_id=job.pk, step="running")
    ui.page.locator("#keep-hours").select_option("168")
    ui.page.locator("h1").click()  # focus elsewhere: only the choice holds the region

    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    expect(ui.page.locator('[data-refresh-id="job-facts"]')).to_contain_text(
        "Succeeded", timeout=5_000
    )
    assert ui.page.locator("#keep-hours").input_value() == "168"
    assert ui.js_errors == []


def test_a_refused_drain_stays_on_the_page_through_refreshes(
    ui: Ui, lab_admin: User, small_cluster
) -> None:
    node = Node.objects.get(name="a0")
    _fast(ui)
    ui.login("root")
    ui.goto("dashboard:cluster", step="cluster")
    # Spaces pass the browser's `required` check; the server strips them and refuses.
    ui.page.locator(f"#drain-reason-{node.pk}").fill("   ")
    with ui.page.expect_navigation():
        ui.page.locator(f"#drain-reason-{node.pk}").press("Enter")
    error = ui.page.locator(f"#drain-reason-{node.pk}-error")
    expect(error).to_contain_text("Not drained.")
    ui.page.locator("h1").click()  # the admin looks elsewhere: the field loses its focus

    # The grid changes (another node drained elsewhere): the page refreshes around it.
    Node.objects.filter(name="a1").update(state=NodeState.DRAINED)
    expect(ui.page.locator('[data-refresh-id="cluster-counts"]')).to_contain_text(
        "idle: cordoned", timeout=5_000
    )
    _refreshes(ui, ui.url("dashboard:cluster"), at_least=3)
    ui.shot("kept")
    expect(error).to_contain_text("Not drained.")
    assert ui.page.locator(f"#drain-reason-{node.pk}").input_value() == "   "
    assert ui.js_errors == []


def test_a_region_the_fresh_page_lacks_is_emptied_and_a_chart_keeps_its_drawing(
    ui: Ui, owner: User
) -> None:
    job = JobFactory(owner=owner, state=JobState.RUNNING)
    _fast(ui)
    ui.login("alice")
    ui.goto("jobs:detail", job_id=job.pk, step="running")
    page_url = ui.url("jobs:detail", job_id=job.pk)
    facts = ui.page.locator('[data-refresh-id="job-facts"]')
    expect(facts).to_contain_text("Running")
    chart = ui.page.locator('[data-refresh-id="job-gpu-use"]')
    expect(chart.locator(".main-svg").first).to_be_attached(timeout=5_000)

    # From now on the server's page has neither region (as when a template leaves one out).
    def without_regions(route: Route) -> None:
        if not route.request.headers.get("x-refresh"):
            route.continue_()
            return
        response = route.fetch()
        body = response.text()
        for region in ("job-facts", "job-gpu-use"):
            body = body.replace(f'data-refresh-id="{region}"', 'data-refresh-id="gone"')
        route.fulfill(response=response, body=body)

    ui.page.route(page_url, without_regions)
    expect(facts).to_have_text("", timeout=5_000)
    expect(chart.locator(".main-svg").first).to_be_attached()
    ui.page.unroute(page_url)
    assert ui.js_errors == []


def test_the_fairness_charts_fill_in_once_there_is_usage(ui: Ui, owner: User) -> None:
    _fast(ui)
    ui.login("alice")
    ui.goto("dashboard:fairness", step="empty")
    users = ui.page.locator('[data-refresh-id="fairness-users-table"]')
    expect(users).to_contain_text("Nobody used GPUs")
    chart = ui.page.locator('[data-refresh-id="fairness-users-chart"]')
    expect(chart.locator(".main-svg").first).to_be_attached(timeout=5_000)

    JobFactory(owner=owner, state=JobState.PENDING)  # a job now: alice has a share
    expect(users.locator("table")).to_contain_text("alice (you)", timeout=5_000)
    expect(users.locator(".table-wrap")).to_have_count(1)
    expect(users.locator("p.empty")).to_have_count(0)
    expect(chart.locator(".xtick text", has_text="alice (you)")).to_have_count(1)
    ui.shot("filled")
    assert ui.js_errors == []
