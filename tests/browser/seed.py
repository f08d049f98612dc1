"""Lab activity for the browser tests: jobs, allocations, GPU metrics, then the aggregates.

The pages never read the job or sample history directly, only the aggregates that
`dashboard.services.aggregates_update` builds; so the seed writes the raw rows the way the
scheduler and the agents would, then runs the aggregation at several past moments (each run
samples the queue and utilization and rebuilds the last two 15-minute buckets), which gives
every chart more than one point.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from accounts.models import LabGroup, User
from agents.models import GpuMinute, GpuSample, JobGpuMinute, JobGpuSample
from cluster.models import Device
from dashboard.services import aggregates_update
from jobs.choices import JobState
from jobs.models import Allocation, Job, JobEvent
from tests.factories import JobFactory


@dataclass(frozen=True)
class Activity:
    running: list[Job]
    pending: list[Job]
    finished: list[Job]


def _submitted(job: Job, at: datetime) -> None:
    # `submitted_at` is auto_now_add: the factory stamps "now", after the job started.
    Job.objects.filter(pk=job.pk).update(submitted_at=at)
    job.submitted_at = at


def job_running(
    *, owner: User, group: LabGroup | None, devices: Sequence[Device], started: datetime, name: str
) -> Job:
    """A RUNNING job holding `devices` since `started` (as a round plus an agent leave it)."""
    job = JobFactory(
        owner=owner,
        group=group,
        name=name,
        num_gpus=len(devices),
        state=JobState.RUNNING,
        attempt=1,
        started_at=started,
        first_started_at=started,
        queue_entered_at=started,
    )
    _submitted(job, started - timedelta(minutes=3))
    Allocation.objects.bulk_create(
        Allocation(job=job, attempt=1, device=device, started_at=started) for device in devices
    )
    JobEvent.objects.create(
        job=job, from_state=JobState.PENDING, to_state=JobState.RUNNING, actor="scheduler"
    )
    return job


def job_finished(
    *,
    owner: User,
    group: LabGroup | None,
    devices: Sequence[Device],
    started: datetime,
    seconds: float,
    name: str,
) -> Job:
    ended = started + timedelta(seconds=seconds)
    job = JobFactory(
        owner=owner,
        group=group,
        name=name,
        num_gpus=len(devices),
        state=JobState.SUCCEEDED,
        attempt=1,
        exit_code=0,
        started_at=started,
        first_started_at=started,
        finished_at=ended,
        queue_entered_at=started - timedelta(minutes=7),
        total_run_seconds=seconds,
    )
    _submitted(job, started - timedelta(minutes=7))
    Allocation.objects.bulk_create(
        Allocation(job=job, attempt=1, device=device, started_at=started, ended_at=ended)
        for device in devices
    )
    return job


def job_pending(
    *, owner: User, group: LabGroup | None, num_gpus: int, waiting: timedelta, name: str
) -> Job:
    since = timezone.now() - waiting
    job = JobFactory(
        owner=owner,
        group=group,
        name=name,
        num_gpus=num_gpus,
        pending_since=since,
        queue_entered_at=since,
    )
    _submitted(job, since)
    return job


def gpu_metrics(*, devices: Sequence[Device], now: datetime, hours: int = 3) -> None:
    """Per-minute roll-ups for `hours`, and raw samples for the last two minutes."""
    rng = random.Random(6)
    start = now.replace(second=0, microsecond=0) - timedelta(hours=hours)
    minutes = []
    for device in devices:
        for step in range(hours * 60 + 1):
            minutes.append(
                GpuMinute(
                    device=device,
                    minute=start + timedelta(minutes=step),
                    samples=2,
                    utilization_avg=rng.uniform(20, 95),
                    memory_used_max_mb=rng.randint(2_000, 30_000),
                    temperature_max_c=rng.randint(40, 80),
                    power_avg_w=rng.uniform(80, 300),
                )
            )
    GpuMinute.objects.bulk_create(minutes, batch_size=2000)
    GpuSample.objects.bulk_create(
        GpuSample(
            device=device,
            at=now - timedelta(seconds=seconds),
            utilization_pct=rng.randint(30, 99),
            memory_used_mb=rng.randint(2_000, 30_000),
            memory_total_mb=40_000,
            temperature_c=rng.randint(40, 80),
            power_w=rng.uniform(80, 300),
        )
        for device in devices
        for seconds in (15, 45, 75)
    )


def job_gpu_metrics(*, job: Job, devices: Sequence[Device], now: datetime, minutes: int) -> None:
    """What a running job used of its GPUs, per minute and per heartbeat."""
    rng = random.Random(job.pk)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    JobGpuMinute.objects.bulk_create(
        JobGpuMinute(
            job=job,
            device=device,
            minute=start + timedelta(minutes=step),
            samples=2,
            utilization_avg=rng.uniform(40, 99),
            memory_used_max_mb=rng.randint(4_000, 30_000),
        )
        for device in devices
        for step in range(minutes + 1)
    )
    JobGpuSample.objects.bulk_create(
        JobGpuSample(
            job=job,
            attempt=job.attempt,
            device=device,
            at=now - timedelta(seconds=seconds),
            utilization_pct=rng.randint(40, 99),
            memory_used_mb=rng.randint(4_000, 30_000),
        )
        for device in devices
        for seconds in range(0, minutes * 60, 30)
    )


def aggregates_over(*, now: datetime, hours: int = 3, step_minutes: int = 15) -> None:
    """Run the aggregation at every `step_minutes` over the last `hours`, as beat would."""
    moments = int(hours * 60 / step_minutes)
    for back in range(moments, -1, -1):
        aggregates_update(now=now - timedelta(minutes=back * step_minutes))


def lab_activity(
    *,
    devices: Sequence[Device],
    people: Sequence[tuple[User, LabGroup | None]],
    now: datetime | None = None,
) -> Activity:
    """A busy afternoon on `devices` (the small cluster: 8 a100 + 2 v100).

    Finished jobs over the last 2 days, one running job per person on its own devices (the
    first person's job runs on the whole first node, with per-job GPU metrics), pending jobs
    with reasons and queue positions, GPU metrics for 3 h, then the aggregates.
    """
    now = now or timezone.now()
    finished = []
    for index in range(12):
        owner, group = people[index % len(people)]
        width = (1, 2, 4)[index % 3]
        first = (index * 2) % (len(devices) - width + 1)
        finished.append(
            job_finished(
                owner=owner,
                group=group,
                devices=devices[first : first + width],
                started=now - timedelta(hours=44 - index * 3.5),
                seconds=3600 * (1 + index % 3),
                name=f"finished-{index}",
            )
        )
    running = []
    free = list(devices)
    for index, (owner, group) in enumerate(people):
        width = 4 if index == 0 else 2
        held, free = free[:width], free[width:]
        if not held:
            break
        running.append(
            job_running(
                owner=owner,
                group=group,
                devices=held,
                started=now - timedelta(minutes=90 - index * 20),
                name=f"training-{owner.username}",
            )
        )
    job_gpu_metrics(job=running[0], devices=devices[:4], now=now, minutes=60)
    pending = []
    reasons = (
        "WaitingForResources: needs 4 × a100 on one node",
        "Behind: 1 job ahead in queue 0",
        "QuotaExceeded: group max GPUs 4",
    )
    for index in range(6):
        owner, group = people[index % len(people)]
        job = job_pending(
            owner=owner,
            group=group,
            num_gpus=(4, 2, 1)[index % 3],
            waiting=timedelta(minutes=5 + 11 * index),
            name=f"waiting-{index}",
        )
        job.reason = reasons[index % 3]
        job.queue_position = index + 1
        job.save(update_fields=["reason", "queue_position"])
        pending.append(job)
    gpu_metrics(devices=devices, now=now)
    aggregates_over(now=now, hours=3, step_minutes=30)
    return Activity(running=running, pending=pending, finished=finished)
