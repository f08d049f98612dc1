"""Idle reaping (jobs.idle_services): a running job that leaves its GPUs idle is warned,
then cancelled after a grace, unless its GPUs are used again or an admin keeps it.

Per-job GPU use comes from the readings node agents report (JobGpuMinute roll-ups here).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from accounts.models import AuditEntry
from agents.models import JobGpuMinute
from jobs.choices import JobState
from jobs.idle_services import IDLE_REAPED, job_idle_keep, jobs_idle_sweep
from jobs.models import Allocation, Job, JobEvent
from jobs.services import job_mark_running, job_preempt, job_requeue, job_start
from jobs.tasks import jobs_idle_sweep_task
from scheduler.selectors import scheduler_config_get
from tests.dashboard.helpers import device, hold, logged_in
from tests.page_forms import form_values
from tests.scheduler.livefixtures import configure

pytestmark = pytest.mark.django_db


@pytest.fixture
def reaping(db):  # type: ignore[no-untyped-def]
    return configure(
        idle_reap=True, idle_threshold_pct=5.0, idle_window_minutes=60, idle_grace_minutes=30
    )


def used(job, gpu, pct: float, *, since, minutes: int) -> None:  # type: ignore[no-untyped-def]
    """Per-minute readings of `job` on `gpu` at `pct` % for `minutes` from `since`."""
    start = since.replace(second=0, microsecond=0)
    JobGpuMinute.objects.bulk_create(
        JobGpuMinute(
            job=job,
            device=gpu,
            minute=start + timedelta(minutes=m),
            samples=6,
            utilization_avg=pct,
            memory_used_max_mb=1000,
        )
        for m in range(minutes)
    )


def idle_for_90_minutes(owner, small_cluster):  # type: ignore[no-untyped-def]
    """A job of `owner` on GPU a0/0 for 90 minutes at 0 %: (the job, its GPU, now)."""
    gpu = device(small_cluster, "a0", 0)
    now = timezone.now()
    job = hold(owner, [gpu], start=now - timedelta(minutes=90))
    used(job, gpu, 0.0, since=now - timedelta(minutes=90), minutes=90)
    return job, gpu, now


def _events(job) -> list[str]:  # type: ignore[no-untyped-def]
    return list(JobEvent.objects.filter(job=job).values_list("message", flat=True))


def test_an_idle_job_is_warned_then_cancelled_after_the_grace(  # type: ignore[no-untyped-def]
    owner, small_cluster, reaping, django_capture_on_commit_callbacks
):
    owner.email = "alice@lab.example"
    owner.save()
    gpu = device(small_cluster, "a0", 0)
    now = timezone.now()
    idle = hold(owner, [gpu], start=now - timedelta(minutes=90))
    used(idle, gpu, 1.0, since=now - timedelta(minutes=90), minutes=90)

    with django_capture_on_commit_callbacks(execute=True):
        sweep = jobs_idle_sweep(now=now)
    assert sweep.warned == [idle.pk]
    idle.refresh_from_db()
    assert idle.idle_warned_at == now and idle.state == JobState.RUNNING
    assert any(message.startswith("Idle: its GPUs were used 1.0 %") for message in _events(idle))
    (warning,) = mail.outbox
    assert warning.to == ["alice@lab.example"]
    assert "is idle and will be cancelled" in warning.subject
    assert "Idle: its GPUs were used 1.0 %" in warning.body

    # Within the grace: warned once, not again, not cancelled.
    assert jobs_idle_sweep(now=now + timedelta(minutes=10)).warned == []
    idle.refresh_from_db()
    assert idle.state == JobState.RUNNING and idle.idle_warned_at == now

    # Grace over, still idle since the warning: cancelled by the system, GPUs let go.
    used(idle, gpu, 0.5, since=now, minutes=31)
    assert jobs_idle_sweep(now=now + timedelta(minutes=31)).reaped == [idle.pk]
    idle.refresh_from_db()
    assert idle.state == JobState.CANCELLED
    assert idle.reason.startswith(f"{IDLE_REAPED}: its GPUs were used 0.5 %")
    assert not Allocation.objects.filter(job=idle, ended_at__isnull=True).exists()


def test_a_warned_job_that_uses_its_gpus_again_is_not_cancelled(owner, small_cluster, reaping):  # type: ignore[no-untyped-def]
    job, gpu, now = idle_for_90_minutes(owner, small_cluster)
    jobs_idle_sweep(now=now)
    # Back at work after the warning, just over the threshold: 6 % for the whole grace.
    used(job, gpu, 6.0, since=now, minutes=33)

    # Within the grace nothing changes: the deadline decides, on the grace's average.
    assert jobs_idle_sweep(now=now + timedelta(minutes=10)).cleared == []
    sweep = jobs_idle_sweep(now=now + timedelta(minutes=31))
    assert (sweep.cleared, sweep.reaped) == ([job.pk], [])
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.idle_warned_at is None
    assert any(message.startswith("No longer idle") for message in _events(job))
    # Its next window starts at the clear: the idle hour before the warning is not
    # held against it again a minute later.
    assert jobs_idle_sweep(now=now + timedelta(minutes=32)).warned == []


def test_only_jobs_idle_over_the_whole_window_are_judged(  # type: ignore[no-untyped-def]
    owner, teammate, small_cluster, reaping
):
    now = timezone.now()
    a0, a1, a2, a3 = (device(small_cluster, "a0", i) for i in range(4))
    busy = hold(owner, [a0], start=now - timedelta(hours=2))
    used(busy, a0, 60.0, since=now - timedelta(minutes=60), minutes=60)
    young = hold(owner, [a1], start=now - timedelta(minutes=20))  # not a full window yet
    used(young, a1, 0.0, since=now - timedelta(minutes=20), minutes=20)
    silent = hold(teammate, [a2], start=now - timedelta(hours=2))  # no per-job reading
    # Two GPUs, one used at 20 %: 10 % over the GPUs it holds, above the threshold.
    half = hold(teammate, [a3, device(small_cluster, "a1", 0)], start=now - timedelta(hours=2))
    used(half, a3, 20.0, since=now - timedelta(minutes=60), minutes=60)
    # Two GPUs, one used at 8 %: 4 %, idle although one GPU looks busy-ish.
    lazy = hold(
        teammate,
        [device(small_cluster, "a1", 1), device(small_cluster, "a1", 2)],
        start=now - timedelta(hours=2),
    )
    used(lazy, device(small_cluster, "a1", 1), 8.0, since=now - timedelta(minutes=60), minutes=60)

    assert jobs_idle_sweep(now=now).warned == [lazy.pk]
    assert not Job.objects.filter(
        pk__in=[busy.pk, young.pk, silent.pk, half.pk], idle_warned_at__isnull=False
    ).exists()


def test_reaping_is_off_unless_an_admin_switches_it_on(owner, small_cluster):  # type: ignore[no-untyped-def]
    gpu = device(small_cluster, "a0", 0)
    now = timezone.now()
    job = hold(owner, [gpu], start=now - timedelta(hours=3))
    used(job, gpu, 0.0, since=now - timedelta(hours=3), minutes=180)
    assert jobs_idle_sweep_task() == {"warned": [], "cleared": [], "reaped": []}
    # A warning left from before it was switched off lapses, so switching it on again
    # does not cancel the job at once.
    Job.objects.filter(pk=job.pk).update(idle_warned_at=now - timedelta(hours=2))
    jobs_idle_sweep(now=now)
    job.refresh_from_db()
    assert job.idle_warned_at is None and job.state == JobState.RUNNING


def test_a_warning_belongs_to_its_run(owner, small_cluster, reaping):  # type: ignore[no-untyped-def]
    # Warned, then preempted and started again: the warning lapses with the run, and the
    # new run, idle for a whole window of its own, is warned (and reaped) afresh.
    job, gpu, now = idle_for_90_minutes(owner, small_cluster)
    assert jobs_idle_sweep(now=now).warned == [job.pk]
    job_preempt(job_id=job.pk, reason="a higher queue")
    assert Job.objects.get(pk=job.pk).idle_warned_at is None
    job_requeue(job_id=job.pk, message="checkpointed")
    job_start(job_id=job.pk, device_ids=[gpu.pk])
    job_mark_running(job_id=job.pk)
    Allocation.objects.filter(job=job, ended_at__isnull=True).update(started_at=now)

    assert jobs_idle_sweep(now=now + timedelta(minutes=10)).warned == []  # too young
    used(job, gpu, 0.0, since=now, minutes=102)  # this run: idle throughout
    later = now + timedelta(minutes=70)
    assert jobs_idle_sweep(now=later).warned == [job.pk]
    assert jobs_idle_sweep(now=later + timedelta(minutes=31)).reaped == [job.pk]


def test_a_window_mostly_without_readings_is_not_judged(owner, small_cluster, reaping):  # type: ignore[no-untyped-def]
    # Two idle minutes after a long image pull are not an idle hour.
    gpu = device(small_cluster, "a0", 0)
    now = timezone.now()
    job = hold(owner, [gpu], start=now - timedelta(minutes=61))
    used(job, gpu, 0.0, since=now - timedelta(minutes=2), minutes=2)
    assert jobs_idle_sweep(now=now).warned == []
    used(job, gpu, 0.0, since=now - timedelta(minutes=40), minutes=38)  # 40 of 60 minutes
    assert jobs_idle_sweep(now=now).warned == [job.pk]


def test_a_job_hovering_at_the_threshold_is_decided_once_at_the_deadline(  # type: ignore[no-untyped-def]
    owner, small_cluster, reaping, django_capture_on_commit_callbacks
):
    owner.email = "alice@lab.example"
    owner.save()
    gpu = device(small_cluster, "a0", 0)
    start = timezone.now() - timedelta(hours=4)
    job = hold(owner, [gpu], start=start)
    # 1 % and 6 % in turn: 3.5 % on average, under the 5 % threshold.
    JobGpuMinute.objects.bulk_create(
        JobGpuMinute(
            job=job,
            device=gpu,
            minute=start.replace(second=0, microsecond=0) + timedelta(minutes=m),
            samples=6,
            utilization_avg=1.0 if m % 2 else 6.0,
            memory_used_max_mb=1,
        )
        for m in range(240)
    )
    outcomes = []
    with django_capture_on_commit_callbacks(execute=True):
        for minute in range(61, 100):  # sweeps every minute from a full window on
            sweep = jobs_idle_sweep(now=start + timedelta(minutes=minute, seconds=30))
            outcomes += [("warned", sweep.warned), ("cleared", sweep.cleared)]
            outcomes += [("reaped", sweep.reaped)]
    assert [kind for kind, ids in outcomes if ids] == ["warned", "reaped"]
    assert len(mail.outbox) == 1


def test_an_admin_keeps_a_job_from_reaping_and_a_student_may_not(  # type: ignore[no-untyped-def]
    owner, lab_admin, small_cluster, reaping
):
    job, gpu, now = idle_for_90_minutes(owner, small_cluster)
    jobs_idle_sweep(now=now)

    with pytest.raises(PermissionDenied):
        job_idle_keep(job_id=job.pk, by=owner, hours=24)
    kept = job_idle_keep(job_id=job.pk, by=lab_admin, hours=24)
    assert kept.idle_warned_at is None
    assert kept.idle_exempt_until > now + timedelta(hours=23)
    assert any("Kept from idle reaping until" in message for message in _events(job))
    # Exempt: neither warned nor cancelled while the exemption lasts.
    later = now + timedelta(hours=2)
    used(job, gpu, 0.0, since=now, minutes=120)
    sweep = jobs_idle_sweep(now=later)
    assert (sweep.warned, sweep.reaped) == ([], [])


def test_the_pages_warn_the_owner_and_offer_admins_the_keep_button(  # type: ignore[no-untyped-def]
    owner, outsider, lab_admin, small_cluster, reaping
):
    job, _, now = idle_for_90_minutes(owner, small_cluster)
    jobs_idle_sweep(now=now)
    url = f"/jobs/{job.pk}/"

    page = logged_in(owner).get(url).content.decode()
    assert "Idle: this job will be cancelled at" in page
    assert "or ask a lab admin to keep it running" in page  # no group, so no coordinator
    assert f"/jobs/{job.pk}/keep/" not in page
    assert logged_in(owner).post(f"/jobs/{job.pk}/keep/", {"hours": "24"}).status_code == 403
    assert logged_in(outsider).get(url).status_code == 404
    # Not theirs to see: a 404, as for every other action on someone else's job.
    assert logged_in(outsider).post(f"/jobs/{job.pk}/keep/", {"hours": "24"}).status_code == 404

    admin = logged_in(lab_admin)
    assert f"/jobs/{job.pk}/keep/" in admin.get(url).content.decode()
    assert admin.post(f"/jobs/{job.pk}/keep/", {"hours": "9999"}).status_code == 302
    job.refresh_from_db()
    assert job.idle_exempt_until is None  # refused: out of range
    admin.post(f"/jobs/{job.pk}/keep/", {"hours": "168"})
    job.refresh_from_db()
    assert job.idle_exempt_until > now + timedelta(days=6)
    page = logged_in(owner).get(url).content.decode()
    assert "Idle: this job will be cancelled" not in page
    assert "kept from it until" in page


def test_the_api_shows_the_warning_to_the_owner(owner, small_cluster, reaping, api_as):  # type: ignore[no-untyped-def]
    job, _, now = idle_for_90_minutes(owner, small_cluster)
    jobs_idle_sweep(now=now)
    data = api_as(owner).get(f"/api/v1/jobs/{job.pk}/").json()
    assert data["idle_warned_at"] is not None and data["idle_exempt_until"] is None


def test_the_settings_page_switches_reaping_on_with_an_audit_entry(lab_admin, db):  # type: ignore[no-untyped-def]
    admin = logged_in(lab_admin)
    data = form_values(admin.get("/manage/scheduler/").content.decode())
    assert "idle_reap" not in data  # an unticked box posts nothing
    data |= {"idle_reap": "on", "idle_grace_minutes": "120"}
    assert admin.post("/manage/scheduler/", data).status_code == 302
    config = scheduler_config_get()
    assert (config.idle_reap, config.idle_grace_minutes) == (True, 120)
    assert set(AuditEntry.objects.values_list("field", flat=True)) == {
        "idle_reap",
        "idle_grace_minutes",
    }
    data |= {"idle_threshold_pct": "150"}
    page = admin.post("/manage/scheduler/", data)
    assert page.status_code == 400
    assert scheduler_config_get().idle_threshold_pct == 5.0


def test_an_admins_keep_during_a_sweep_wins(owner, lab_admin, small_cluster, reaping, monkeypatch):  # type: ignore[no-untyped-def]
    from jobs import idle_services

    gpu = device(small_cluster, "a0", 0)
    now = timezone.now()
    job = hold(owner, [gpu], start=now - timedelta(minutes=90))
    used(job, gpu, 0.0, since=now - timedelta(minutes=121), minutes=155)  # idle throughout
    assert jobs_idle_sweep(now=now).warned == [job.pk]
    real = idle_services.jobs_gpu_use

    def kept_meanwhile(**kwargs):  # type: ignore[no-untyped-def]
        job_idle_keep(job_id=job.pk, by=lab_admin, hours=24)  # after the sweep read the job
        return real(**kwargs)

    monkeypatch.setattr(idle_services, "jobs_gpu_use", kept_meanwhile)
    assert jobs_idle_sweep(now=now + timedelta(minutes=31)).reaped == []
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_a_job_that_ended_cannot_be_kept(owner, lab_admin, small_cluster, reaping):  # type: ignore[no-untyped-def]
    job = hold(owner, [device(small_cluster, "a0", 0)], state=JobState.SUCCEEDED)
    response = logged_in(lab_admin).post(f"/jobs/{job.pk}/keep/", {"hours": "24"}, follow=True)
    assert "only a running job can be kept" in response.content.decode()
    job.refresh_from_db()
    assert job.idle_exempt_until is None


def test_a_grace_mostly_without_readings_lifts_the_warning(owner, small_cluster, reaping):  # type: ignore[no-untyped-def]
    # The agent went quiet for most of the grace: two idle minutes do not cancel a job.
    job, gpu, now = idle_for_90_minutes(owner, small_cluster)
    assert jobs_idle_sweep(now=now).warned == [job.pk]
    used(job, gpu, 0.0, since=now + timedelta(minutes=28), minutes=2)
    sweep = jobs_idle_sweep(now=now + timedelta(minutes=31))
    assert (sweep.cleared, sweep.reaped) == ([job.pk], [])
    assert any(message.startswith("Idle warning lifted") for message in _events(job))


def test_minutes_without_a_utilization_reading_do_not_count_as_readings(  # type: ignore[no-untyped-def]
    owner, small_cluster, reaping
):
    # NVML read the memory but not the utilization for 58 minutes: 2 idle minutes are all
    # there is to judge, too few for a warning.
    gpu = device(small_cluster, "a0", 0)
    now = timezone.now()
    job = hold(owner, [gpu], start=now - timedelta(minutes=90))
    used(job, gpu, 0.0, since=now - timedelta(minutes=60), minutes=2)
    JobGpuMinute.objects.bulk_create(
        JobGpuMinute(
            job=job,
            device=gpu,
            minute=(now - timedelta(minutes=58)).replace(second=0, microsecond=0)
            + timedelta(minutes=m),
            samples=6,
            utilization_avg=None,
            memory_used_max_mb=1000,
        )
        for m in range(58)
    )
    assert jobs_idle_sweep(now=now).warned == []
