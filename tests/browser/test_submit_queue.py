"""A student's path: log in, submit a job with the form, find it in the queue with its reason."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from accounts.models import LabGroup, User
from cluster.models import Device
from jobs.choices import JobState
from jobs.models import Job
from scheduler.services import scheduling_round_run
from tests.browser.conftest import Ui
from tests.browser.seed import job_running


def test_student_submits_a_job_and_sees_it_waiting_in_the_queue(
    ui: Ui, owner: User, teammate: User, vision: LabGroup, small_cluster: list[Device]
) -> None:
    # Bob already holds every GPU, so Alice's job must wait and the round says why.
    started = timezone.now() - timedelta(minutes=5)
    for node_devices in (small_cluster[:4], small_cluster[4:8], small_cluster[8:]):
        job_running(
            owner=teammate, group=vision, devices=node_devices, started=started, name="bob-train"
        )

    ui.login("alice")
    ui.goto("jobs:submit", step="submit-form")
    form = ui.page.locator("main form")
    form.get_by_label("Name").fill("resnet-sweep")
    form.get_by_label("Image").fill("pytorch/pytorch:2.4.0")
    form.get_by_label("Command").fill("python train.py --epochs 3")
    form.get_by_label("GPUs").fill("2")
    with ui.page.expect_navigation():
        form.get_by_role("button", name="Submit").click()
    ui.shot("submitted")

    job = Job.objects.get(owner=owner, name="resnet-sweep")
    assert ui.page.url.endswith(f"/jobs/{job.pk}/")
    assert f"Job #{job.pk} submitted" in ui.page.locator(".messages").inner_text()
    assert job.command == ["python", "train.py", "--epochs", "3"]
    assert job.num_gpus == 2

    scheduling_round_run()
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert job.reason, "a held job gets a reason from the round"
    # The page turns the code into words but keeps the detail ("needs 2 GPUs ...").
    code, _, detail = job.reason.partition(": ")

    response = ui.goto("dashboard:queue", step="queue")
    assert response.status == 200
    row = ui.page.locator("table tr", has=ui.page.get_by_role("link", name=f"#{job.pk} "))
    assert row.count() == 1, f"job #{job.pk} is not listed once in the pending table"
    text = row.inner_text()
    assert "resnet-sweep" in text
    assert (detail or code) in text, f"reason {job.reason!r} missing from the row {text!r}"
    # And the student's own summary names it too, with its position.
    mine = ui.page.locator("section", has=ui.page.get_by_role("heading", name="Your pending jobs"))
    assert f"#{job.pk}" in mine.inner_text()
    assert "position 1" in mine.inner_text()
