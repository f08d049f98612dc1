"""An admin changes a group's weight in the quota editor and the fair-share order follows."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from accounts.models import AuditEntry, LabGroup, User
from cluster.models import Device
from tests.browser.conftest import Ui
from tests.browser.seed import aggregates_over, job_pending, job_running

HOUR = 3600.0


def fair_share_order(ui: Ui) -> list[str]:
    """The user names of the "Current fair-share order" table, top rank first."""
    section = ui.page.locator(
        "section", has=ui.page.get_by_role("heading", name="Current fair-share order")
    )
    # Found by its header, so a reordering of the columns does not break the test.
    return section.locator("table").evaluate(
        """(table) => {
          const headers = [...table.querySelectorAll("thead th")];
          const column = headers.findIndex((th) => th.textContent.trim() === "User");
          return [...table.querySelectorAll("tbody tr")].map(
            (row) => row.cells[column].textContent.replace("(you)", "").trim());
        }"""
    )


def test_admin_changes_a_group_weight_and_the_fair_share_order_flips(
    ui: Ui,
    owner: User,
    outsider: User,
    lab_admin: User,
    vision: LabGroup,
    nlp: LabGroup,
    small_cluster: list[Device],
) -> None:
    # alice (vision, weight 2) has used 3 normalized GPU-hours, carol (nlp, weight 1) 2.
    # Normalized usage = usage / (user weight × group share): alice 3 / (2/3) = 4.5,
    # carol 2 / (1/3) = 6, so alice comes first. With vision at 0.5 the shares become 1/3
    # and 2/3: alice 9, carol 3, and carol comes first.
    now = timezone.now()
    for person, group, usage, devices in (
        (owner, vision, 3 * HOUR, small_cluster[8:9]),
        (outsider, nlp, 2 * HOUR, small_cluster[9:10]),
    ):
        User.objects.filter(pk=person.pk).update(usage=usage, usage_updated_at=now)
        LabGroup.objects.filter(pk=group.pk).update(usage=usage, usage_updated_at=now)
        job_running(
            owner=person,
            group=group,
            devices=devices,
            started=now - timedelta(minutes=2),
            name=f"{person.username}-running",
        )
        job_pending(
            owner=person,
            group=group,
            num_gpus=4,
            waiting=timedelta(minutes=10),
            name=f"{person.username}-waiting",
        )
    aggregates_over(now=now, hours=1, step_minutes=30)

    ui.login("root")
    ui.goto("dashboard:fairness", step="fairness-before")
    assert fair_share_order(ui) == ["alice", "carol"]

    ui.goto("dashboard:quotas", step="quotas")
    with ui.page.expect_navigation():
        ui.page.get_by_role("link", name="Edit group vision").click()
    assert ui.page.url == ui.url("dashboard:quota-group", group_id=vision.pk)
    ui.shot("quota-edit")
    weight = ui.page.get_by_label("Weight")
    assert float(weight.input_value()) == 2.0
    weight.fill("0.5")
    with ui.page.expect_navigation():
        ui.page.get_by_role("button", name="Save").click()
    ui.shot("saved")
    assert "Saved group vision: weight" in ui.page.locator(".messages").inner_text()
    vision.refresh_from_db()
    assert vision.weight == 0.5
    assert AuditEntry.objects.filter(target_name="vision", field="weight").count() == 1

    ui.goto("dashboard:fairness", step="fairness-after")
    assert fair_share_order(ui) == ["carol", "alice"]
