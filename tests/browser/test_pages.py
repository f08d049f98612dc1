"""Every page in a real browser: charts drawn with data, nothing loaded from outside, and no
sideways scrolling on a phone (390 px) or a laptop (1280 px).

Each test seeds a busy lab (`seed.lab_activity`: finished, running and pending jobs, GPU
metrics, aggregates) so pages show tables and charts as in production, not empty states.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from accounts.models import LabGroup, User
from cluster.models import Device
from tests.browser.charts import charts_not_drawn, charts_with_points
from tests.browser.conftest import DESKTOP, PHONE, Ui
from tests.browser.seed import Activity, lab_activity
from tests.factories import JobFactory


@dataclass(frozen=True)
class Lab:
    activity: Activity
    alice: User
    vision: LabGroup


@pytest.fixture
def lab(
    owner: User,
    teammate: User,
    outsider: User,
    lab_admin: User,
    vision: LabGroup,
    nlp: LabGroup,
    small_cluster: list[Device],
) -> Lab:
    people = [(owner, vision), (teammate, vision), (outsider, nlp)]
    return Lab(
        activity=lab_activity(devices=small_cluster, people=people), alice=owner, vision=vision
    )


# (URL name, its kwargs from the lab, admin only)
Kwargs = Callable[[Lab], dict[str, int]]
NONE: Kwargs = lambda lab: {}  # noqa: E731
PAGES: list[tuple[str, Kwargs, bool]] = [
    ("jobs:list", NONE, False),
    ("jobs:submit", NONE, False),
    ("jobs:detail", lambda lab: {"job_id": lab.activity.running[0].pk}, False),
    ("dashboard:queue", NONE, False),
    ("dashboard:cluster", NONE, False),
    ("dashboard:utilization", NONE, False),
    ("dashboard:fairness", NONE, False),
    ("accounts:tokens", NONE, False),
    ("dashboard:usage", NONE, True),
    ("dashboard:quotas", NONE, True),
    ("dashboard:quota-user", lambda lab: {"user_id": lab.alice.pk}, True),
    ("dashboard:quota-group", lambda lab: {"group_id": lab.vision.pk}, True),
    ("dashboard:scheduler-settings", NONE, True),
    ("dashboard:audit", NONE, True),
]
# The Plotly pages of issue 6; the job detail chart shows the job's own GPU use.
CHART_PAGES = ["dashboard:queue", "dashboard:utilization", "dashboard:fairness", "jobs:detail"]


def _kwargs(name: str) -> Kwargs:
    return next(kwargs for page, kwargs, _ in PAGES if page == name)


def _cases() -> list[pytest.param]:
    # Students see every page they may open; the admin sees every page (and a longer nav).
    cases = []
    for name, _, admin_only in PAGES:
        people = ("root",) if admin_only else ("alice", "root")
        cases += [pytest.param(who, name, id=f"{who}-{name.replace(':', '-')}") for who in people]
    return cases


@pytest.mark.parametrize("name", CHART_PAGES)
def test_plotly_page_draws_a_chart_with_data(ui: Ui, lab: Lab, name: str) -> None:
    ui.login("alice")
    response = ui.goto(name, step="page", **_kwargs(name)(lab))
    assert response.status == 200, f"{name} answered {response.status}"

    with_points = charts_with_points(ui.page)
    assert with_points, f"{name}: no drawn chart has a trace with points"
    assert charts_not_drawn(ui.page) == [], f"{name}: some charts were never drawn"
    assert ui.js_errors == [], f"{name}: JavaScript errors {ui.js_errors}"
    assert ui.page.evaluate("typeof window.Plotly") == "object"


def test_plotly_is_served_locally_and_no_request_leaves_the_machine(ui: Ui, lab: Lab) -> None:
    """Labs run offline: every page, Plotly included, loads only from the server itself."""
    ui.login("root")
    for name, kwargs, _ in PAGES:
        ui.goto(name, step=name.replace(":", "-"), **kwargs(lab))
    ui.goto("api-docs", step="api-docs")  # Swagger UI, also served from our static files
    plotly = [url for url in ui.requests if url.endswith("plotly.min.js")]
    assert plotly, "no page loaded plotly.min.js"
    assert all(url.startswith(ui.base_url + "/static/") for url in plotly), plotly
    assert ui.external_requests() == []


@pytest.mark.parametrize("width", [PHONE["width"], DESKTOP["width"]])
def test_login_page_fits(ui: Ui, width: int) -> None:
    ui.set_width(width)
    response = ui.goto("/login/", step=f"{width}px")
    assert response.status == 200
    ui.assert_no_horizontal_overflow(width)


@pytest.mark.parametrize(("who", "name"), _cases())
def test_page_fits_a_phone_and_a_laptop_without_sideways_scrolling(
    ui: Ui, lab: Lab, who: str, name: str
) -> None:
    ui.login(who)
    for viewport in (PHONE, DESKTOP):
        width = viewport["width"]
        ui.set_width(width)
        response = ui.goto(name, step=f"{width}px", **_kwargs(name)(lab))
        assert response.status == 200, f"{name} answered {response.status} to {who}"
        if ui.page.locator(".chart[data-figure]").count():
            # Plotly sizes a chart as it draws it (at DOMContentLoaded, before the screenshot
            # `goto` took); make sure it did before measuring.
            charts_with_points(ui.page)
        ui.assert_no_horizontal_overflow(width)
    assert ui.js_errors == [], f"{name}: JavaScript errors {ui.js_errors}"


# Focusable things: what axe's nested-interactive rule looks for inside an image.
_CONTROLS_IN_IMAGES_JS = """() => [...document.querySelectorAll('[role="img"]')].flatMap((img) =>
  [...img.querySelectorAll('a[href], button, input, select, textarea, [tabindex]')]
    .filter((el) => el.tabIndex >= 0)
    .map((el) => el.getAttribute("aria-label") || el.tagName))"""
_CHART_IMAGES_JS = """() => [...document.querySelectorAll('.chart[data-figure]')].map((chart) => {
  const img = chart.querySelector('.main-svg[role="img"]');
  return {id: chart.id, label: img ? img.getAttribute("aria-label") : null,
          expected: chart.dataset.label};
})"""


@pytest.mark.parametrize("name", CHART_PAGES)
def test_charts_offer_no_upload_and_keep_their_buttons_outside_the_image(
    ui: Ui, lab: Lab, name: str
) -> None:
    """Plotly's "Share chart…" uploads the figure (names, GPU-hours) to Plotly Cloud; and
    buttons inside role="img" are tab stops a screen reader cannot name."""
    ui.login("alice")
    ui.goto(name, step="page", **_kwargs(name)(lab))
    charts_with_points(ui.page)
    ui.page.wait_for_function(
        """() => [...document.querySelectorAll('.chart[data-figure]')]
              .every((chart) => chart.querySelector('.main-svg[role="img"]'))"""
    )

    buttons = ui.page.locator(".modebar-btn")
    names = [buttons.nth(i).get_attribute("aria-label") or "" for i in range(buttons.count())]
    assert "Download plot as a PNG" in names, f"{name}: the modebar was not drawn: {names}"
    assert not [n for n in names if "share" in n.lower() or "cloud" in n.lower()], names
    assert ui.page.locator('[data-title^="Share"], [data-attr="sendDataToCloud"]').count() == 0
    assert ui.page.evaluate(_CONTROLS_IN_IMAGES_JS) == []
    for chart in ui.page.evaluate(_CHART_IMAGES_JS):
        assert chart["label"] and chart["label"] == chart["expected"], chart
    assert ui.js_errors == []


NARROW = 375  # the narrowest common phone
LONG_NAME = "run_" + "resnet50_lr0.1_bs256_" * 5 + "final"  # one word of 114 characters


def test_a_long_job_name_wraps_instead_of_scrolling_the_page_sideways(
    ui: Ui, owner: User, small_cluster: list[Device]
) -> None:
    job = JobFactory(owner=owner, name=LONG_NAME)
    ui.login("alice")
    ui.set_width(NARROW)
    for step, path in (
        ("detail", f"/jobs/{job.pk}/"),  # the name in the <h1>
        ("log", f"/jobs/{job.pk}/logs/"),  # the log page's <h1>
        ("clone", f"/jobs/submit/?clone={job.pk}"),  # the clone note
    ):
        response = ui.goto(path, step=step)
        assert response.status == 200, f"{path} answered {response.status}"
        assert LONG_NAME in ui.page.locator("main").inner_text().replace("\n", "")
        ui.assert_no_horizontal_overflow(NARROW)
