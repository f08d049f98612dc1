"""Job arrays (Slurm's --array): one submission, N tasks that differ only in
GPULAB_ARRAY_INDEX, at most K of them holding GPUs at once."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from agents.runtimes import LaunchSpec, job_environment
from agents.services import _launch_spec
from config.errors import ValidationFailed
from jobs.choices import JobState
from jobs.models import Job, JobEvent
from jobs.services import JobSpec, job_cancel, job_finish, job_mark_running, job_submit
from scheduler.core.types import Decisions
from scheduler.selectors import scheduler_config_get, scheduler_settings_from
from scheduler.services import decisions_apply, scheduling_round_run
from scheduler.snapshot import snapshot_build
from tests.scheduler.livefixtures import age_job, configure_tiresias_rules, simulated_cluster

pytestmark = pytest.mark.django_db


def _submit(owner, **fields) -> Job:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["python", "sweep.py"], **fields)
    return job_submit(owner=owner, spec=spec)


@pytest.fixture
def cluster() -> None:
    configure_tiresias_rules()
    simulated_cluster(nodes=1, gpus_per_node=8)


def test_an_array_is_n_tasks_named_and_numbered_in_one_submission(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    first = _submit(owner, name="lr", array_size=3)

    tasks = list(Job.objects.order_by("array_index"))
    assert first == tasks[0]
    assert [(t.name, t.array_index, t.array_id) for t in tasks] == [
        ("lr[0]", 0, first.array_id), ("lr[1]", 1, first.array_id), ("lr[2]", 2, first.array_id),
    ]  # fmt: skip
    assert all(t.command == ["python", "sweep.py"] and t.state == JobState.PENDING for t in tasks)
    assert JobEvent.objects.filter(message__startswith="Submitted task 2 of array").count() == 1


def test_at_most_the_cap_of_an_arrays_tasks_hold_gpus_at_once(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    first = _submit(owner, array_size=5, array_max_running=2)

    scheduling_round_run()

    tasks = list(Job.objects.order_by("array_index"))
    assert [t.state for t in tasks] == [JobState.STARTING] * 2 + [JobState.PENDING] * 3
    assert tasks[2].reason == (f"ArrayLimit: array {first.array_id} runs at most 2 tasks at once")
    Job.objects.filter(pk=tasks[0].pk).update(state=JobState.SUCCEEDED)
    now = timezone.now()
    tasks[0].allocations.update(ended_at=now, released_at=now)
    scheduling_round_run()
    assert list(Job.objects.order_by("array_index").values_list("state", flat=True)) == [
        JobState.SUCCEEDED, JobState.STARTING, JobState.STARTING,
        JobState.PENDING, JobState.PENDING,
    ]  # fmt: skip


def test_an_uncapped_array_runs_as_many_tasks_as_fit(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    _submit(owner, array_size=10)

    scheduling_round_run()

    assert Job.objects.filter(state=JobState.STARTING).count() == 8  # the node's 8 GPUs


def test_each_task_is_launched_with_its_index(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    first = _submit(owner, array_size=2)
    scheduling_round_run()
    second = Job.objects.get(array_index=1)

    spec = _launch_spec(job=second, node=second.allocations.get().device.node)

    environment = job_environment(spec)
    assert (environment["GPULAB_ARRAY_ID"], environment["GPULAB_ARRAY_INDEX"]) == (
        str(first.array_id), "1",
    )  # fmt: skip
    assert environment["GPULAB_ARRAY_SIZE"] == "2"
    plain = LaunchSpec(1, 1, "img", ["true"], {}, ["GPU-x"], "runs")
    assert "GPULAB_ARRAY_INDEX" not in job_environment(plain)


def test_a_bad_array_names_the_field_and_the_quota_counts_every_task(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    for fields, field in (
        ({"array_size": 0}, "array_size"),
        ({"array_size": 1001}, "array_size"),
        ({"array_size": "3"}, "array_size"),
        ({"array_size": 3, "array_max_running": 0}, "array_max_running"),
        ({"array_size": 3, "array_max_running": 2**31}, "array_max_running"),
        ({"array_max_running": 2}, "array_max_running"),
    ):
        with pytest.raises(ValidationFailed) as refused:
            _submit(owner, **fields)
        assert list(refused.value.errors) == [field]
    owner.max_pending_jobs = 4
    owner.save()
    with pytest.raises(ValidationFailed) as quota:
        _submit(owner, array_size=5)
    assert quota.value.errors == {
        "quota": [
            "QuotaExceeded: user alice already has 0 pending jobs (max 4); this array adds 5."
        ]
    }
    assert not Job.objects.exists()  # all or nothing


def test_the_api_submits_an_array_and_lists_its_tasks_to_their_owner_only(
    owner, outsider, api_as, cluster
) -> None:  # type: ignore[no-untyped-def]
    made = api_as(owner).post(
        "/api/v1/jobs/",
        {"image": "img:1", "command": ["true"], "array_size": 3, "array_max_running": 1},
        format="json",
    )
    assert made.status_code == 201
    array = made.json()["array"]
    assert (array["index"], array["size"], array["max_running"]) == (0, 3, 1)

    listed = api_as(owner).get("/api/v1/jobs/", {"array": array["id"]}).json()["results"]
    assert [job["array"]["index"] for job in listed] == [0, 1, 2]
    assert api_as(outsider).get("/api/v1/jobs/", {"array": array["id"]}).json()["count"] == 0
    assert api_as(owner).get("/api/v1/jobs/", {"array": "x"}).status_code == 400


def test_the_form_submits_an_array_and_the_page_shows_the_task(owner, cluster) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(owner)
    form = {
        "image": "img:1", "command": "python sweep.py", "num_gpus": 1,
        "consolidation": "preferred", "max_retries": 0, "array_size": 4,
        "array_max_running": 2,
    }  # fmt: skip

    page = client.post("/jobs/submit/", form, follow=True).content.decode()

    first = Job.objects.get(array_index=0)
    assert Job.objects.count() == 4
    assert f"Array {first.array_id} submitted: 4 jobs" in page
    assert "task 0 of 4" in page and "at most 2 running at once" in page


def _pending_since(job_id: int) -> float:
    """How long the job has waited as the next round's snapshot sees it, in seconds;
    the apply step then stores where its wait starts (applied with no decisions)."""
    settings = scheduler_settings_from(scheduler_config_get())
    now = timezone.now()
    snapshot, context = snapshot_build(now=now, settings=settings)
    decisions_apply(decisions=Decisions(), context=context, now=now)
    return now.timestamp() - snapshot.job_by_id[job_id].pending_since


@pytest.mark.parametrize("slot_opens_by", ["success", "retry", "cancel"])
def test_a_task_the_cap_held_starts_its_wait_when_it_is_offered(owner, slot_opens_by) -> None:  # type: ignore[no-untyped-def]
    # However the slot opens, the hours the cap held a task are not waiting: the
    # starvation guard would let it preempt other people's jobs at once.
    simulated_cluster(nodes=1, gpus_per_node=4)
    first = _submit(owner, num_gpus=2, array_size=2, array_max_running=1, max_retries=2)
    scheduling_round_run()  # task 0 starts; task 1 is held by the cap
    held = Job.objects.get(array_id=first.array_id, array_index=1)
    assert held.reason.startswith("ArrayLimit:")
    age_job(held.pk, seconds=5 * 3600)
    if slot_opens_by == "cancel":
        job_cancel(job_id=first.pk, by=owner)
    else:
        job_mark_running(job_id=first.pk)
        job_finish(job_id=first.pk, exit_code=0 if slot_opens_by == "success" else 1)
    assert _pending_since(held.pk) < 5  # offered: its wait starts now
    held.refresh_from_db()
    assert (timezone.now() - held.pending_since).total_seconds() < 60  # and is stored so

    scheduling_round_run()

    assert Job.objects.get(pk=held.pk).state == JobState.STARTING


def test_a_task_really_waiting_for_gpus_keeps_its_wait_when_a_sibling_ends(owner) -> None:  # type: ignore[no-untyped-def]
    simulated_cluster(nodes=1, gpus_per_node=1)
    first = _submit(owner, array_size=3, array_max_running=2)
    scheduling_round_run()  # task 0 starts on the one GPU; task 1 waits for GPUs, 2 held
    waiting = Job.objects.get(array_id=first.array_id, array_index=1)
    assert waiting.reason.startswith("WaitingForResources") or waiting.reason.startswith("Behind")
    age_job(waiting.pk, seconds=5 * 3600)
    job_cancel(job_id=Job.objects.get(array_id=first.array_id, array_index=2).pk, by=owner)

    assert _pending_since(waiting.pk) > 4 * 3600  # its real wait stands


def test_an_array_is_cancelled_in_one_go_by_its_owner_only(
    owner, outsider, lab_admin, api_as, cluster
) -> None:  # type: ignore[no-untyped-def]
    first = _submit(owner, array_size=4, array_max_running=2)
    scheduling_round_run()  # tasks 0 and 1 start, 2 and 3 are held by the cap
    Job.objects.filter(pk=first.pk).update(state=JobState.SUCCEEDED)
    url = f"/api/v1/arrays/{first.array_id}/cancel/"

    assert api_as(outsider).post(url).status_code == 404
    done = api_as(owner).post(url)

    assert done.status_code == 200
    tasks = {t.array_index: t for t in Job.objects.filter(array_id=first.array_id)}
    assert done.json() == {
        "array": first.array_id, "cancelled": [tasks[3].pk, tasks[2].pk, tasks[1].pk],
    }  # fmt: skip
    assert [tasks[i].state for i in range(4)] == [JobState.SUCCEEDED] + [JobState.CANCELLED] * 3
    assert api_as(lab_admin).post(url).json()["cancelled"] == []  # nothing left
    assert api_as(owner).post("/api/v1/arrays/999999/cancel/").status_code == 404
