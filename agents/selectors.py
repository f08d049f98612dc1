"""Reads for the agents: which attempts should be running where."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Avg, Exists, F, Max, Min, OuterRef, Q, Sum, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from cluster.choices import NodeState
from cluster.models import Device, Node
from jobs.choices import HOLDING_STATES, JobState
from jobs.models import Allocation, Job

from .models import AttemptLog, JobGpuMinute, JobGpuSample, JobProgress


@dataclass(frozen=True)
class LiveAttempt:
    job_id: int
    attempt: int
    state: JobState


def node_of_attempt(*, job_id: int, attempt: int) -> Node | None:
    allocation = (
        Allocation.objects.filter(job_id=job_id, attempt=attempt)
        .select_related("device__node")
        .first()
    )
    return allocation.device.node if allocation else None


def devices_of_attempt(*, job_id: int, attempt: int) -> list[Device]:
    return [
        allocation.device
        for allocation in Allocation.objects.filter(job_id=job_id, attempt=attempt)
        .select_related("device")
        .order_by("device__index")
    ]


def live_attempts_on_node(*, node_id: int) -> list[LiveAttempt]:
    """The attempts that hold devices of this node now (STARTING, RUNNING, PREEMPTING)."""
    rows = (
        Allocation.objects.filter(
            ended_at__isnull=True, device__node_id=node_id, job__state__in=HOLDING_STATES
        )
        .values_list("job_id", "attempt", "job__state")
        .distinct()
        .order_by("job_id")
    )
    return [LiveAttempt(job_id, attempt, JobState(state)) for job_id, attempt, state in rows]


def attempts_to_remove(
    *, node_id: int, kept: Iterable[tuple[int, int]], ended_before: datetime
) -> list[tuple[int, int]]:
    """Of the attempts a node keeps, those it may delete: every device the attempt held
    there was released before `ended_before` (so nothing of it still runs or is about
    to), or its job no longer exists (an admin deleted it, and its allocations with it).
    An attempt the database knows nothing else about is kept."""
    kept = set(kept)
    job_ids = {job_id for job_id, _ in kept}
    existing = set(Job.objects.filter(pk__in=job_ids).values_list("pk", flat=True))
    old: dict[tuple[int, int], bool] = {}
    rows = Allocation.objects.filter(job_id__in=job_ids, device__node_id=node_id).values_list(
        "job_id", "attempt", "released_at"
    )
    for job_id, attempt, released_at in rows:
        pair = (job_id, attempt)
        done = released_at is not None and released_at < ended_before
        old[pair] = old.get(pair, True) and done
    return sorted(pair for pair in kept if old.get(pair, False) or pair[0] not in existing)


def finished_attempt_removed(*, job: Job, now: datetime | None = None) -> bool:
    """Whether the current attempt's log is gone from its node by now: every device it
    held was released more than the keep time ago (`agents.services.agent_node_prune`)."""
    keep_days = settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS
    if keep_days == 0 or job.attempt == 0:
        return False
    ended_before = (now or timezone.now()) - timedelta(days=keep_days)
    allocations = Allocation.objects.filter(job_id=job.pk, attempt=job.attempt)
    return (
        allocations.exists()
        and not allocations.filter(
            Q(released_at__isnull=True) | Q(released_at__gte=ended_before)
        ).exists()
    )


# An ended attempt's log is copied within this long of its release, when its node is
# polled; with GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = 0 (nodes keep every attempt), also
# for this long: older ones stay readable on their node.
ARCHIVE_LOOKBACK_DAYS = 30


def attempts_to_archive(
    *, now: datetime | None = None, per_node: int = 50
) -> dict[int, list[tuple[int, int]]]:
    """Ended attempts whose logs are not copied yet, by the node that ran them (the one
    `node_of_attempt` names), newest first, at most `per_node` each; polled nodes only.

    Ended = every device the attempt held is released, so its process is gone and its
    log complete. Only those released within the keep time: older ones the node has
    removed, or is about to, and `agent_node_prune` copies what it removes.
    """
    keep_days = settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS or ARCHIVE_LOOKBACK_DAYS
    since = (now or timezone.now()) - timedelta(days=keep_days)
    same_attempt = {"job_id": OuterRef("job_id"), "attempt": OuterRef("attempt")}
    rows = (
        Allocation.objects.filter(released_at__gte=since)
        .exclude(Exists(Allocation.objects.filter(**same_attempt, released_at__isnull=True)))
        .exclude(Exists(AttemptLog.objects.filter(**same_attempt)))
        .values("job_id", "attempt")
        .annotate(released=Max("released_at"), first_device=Min("device_id"))
        .order_by("-released", "job_id", "attempt")
    )
    pollable = set(nodes_to_poll())
    node_of_device = dict(Device.objects.filter(node_id__in=pollable).values_list("id", "node_id"))
    by_node: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for row in rows.iterator():
        node_id = node_of_device.get(row["first_device"])
        if node_id is not None and len(by_node[node_id]) < per_node:
            by_node[node_id].append((row["job_id"], row["attempt"]))
    return dict(by_node)


def attempt_log_get(*, job_id: int, attempt: int) -> AttemptLog | None:
    return AttemptLog.objects.filter(job_id=job_id, attempt=attempt).first()


def nodes_to_prune() -> list[int]:
    """Real nodes whose finished attempts may be removed: those polled (not DOWN, host
    key approved), and only when gpulab is told to remove them at all."""
    if settings.GPULAB_FINISHED_ATTEMPT_KEEP_DAYS == 0:
        return []
    return nodes_to_poll()


def nodes_to_poll() -> list[int]:
    """Real nodes to check over SSH: every one that is not DOWN and has an approved host
    key. Idle nodes too, since an attempt of a cancelled job holds no allocation any more
    but may still run there until the poll stops it."""
    return list(
        Node.objects.filter(simulated=False, host_keys__approved_at__isnull=False)
        .exclude(state=NodeState.DOWN)
        .values_list("id", flat=True)
        .distinct()
        .order_by("id")
    )


@dataclass(frozen=True)
class OverdueAttempts:
    launches: list[tuple[int, int]]  # STARTING for too long: the launch task was lost
    stops: list[tuple[int, int]]  # PREEMPTING for too long: the stop task was lost


def attempts_overdue(
    *, now: datetime, launch_after: timedelta, stop_after: timedelta
) -> OverdueAttempts:
    """Attempts on real nodes whose launch or stop should long have happened (a worker
    died with the task). Both services are idempotent, so asking again is safe."""
    live = Allocation.objects.filter(ended_at__isnull=True, device__node__simulated=False)

    def stuck(state: JobState, older_than: datetime) -> list[tuple[int, int]]:
        rows = live.filter(job__state=state, job__updated_at__lt=older_than)
        return sorted(set(rows.values_list("job_id", "attempt")))

    return OverdueAttempts(
        launches=stuck(JobState.STARTING, now - launch_after),
        stops=stuck(JobState.PREEMPTING, now - stop_after),
    )


# A STARTING job's reason while its launch task was never sent (the broker refused it):
# written by `agents.services.launch_undelivered_mark`, cleared once it is sent.
LAUNCH_UNDELIVERED_REASON = (
    "Launch not sent yet: the task queue was unreachable. The next node poll asks again."
)


def launches_undelivered() -> list[tuple[int, int]]:
    """STARTING attempts on real nodes whose launch task never reached the broker.

    Unlike `attempts_overdue`, no waiting is needed: no task for them exists, so asking
    again cannot race a launch under way.
    """
    rows = Allocation.objects.filter(
        ended_at__isnull=True,
        device__node__simulated=False,
        job__state=JobState.STARTING,
        job__reason=LAUNCH_UNDELIVERED_REASON,
    ).values_list("job_id", "attempt")
    return sorted(set(rows))


# Readings spanning less than this are start-up noise (data loading, compilation).
MIN_PROGRESS_SPAN = timedelta(seconds=60)
# How far back other runs of the same program count, and at most how many attempts.
PROGRESS_HISTORY = timedelta(days=30)
PROGRESS_ROWS = 10_000


def argv_text(path: str = "command") -> Cast:
    """A job's argv as the database renders its JSON (`path` leads to the job's `command`):
    programs are compared as text, never decoded, since a round reads every active job's."""
    return Cast(path, output_field=TextField())


@dataclass(frozen=True)
class JobProgram:
    """What makes two jobs the same program, so one's speed predicts the other's."""

    job_id: int
    image: str
    command_text: str  # `argv_text()` of the job's row
    num_gpus: int

    @property
    def key(self) -> tuple[str, str, int]:
        return self.image, self.command_text, self.num_gpus


def measured_rates(
    *, jobs: Iterable[JobProgram], now: datetime
) -> dict[int, tuple[tuple[str, float], ...]]:
    """Each job's measured rates (its own progress unit per second) as (type name, rate)
    pairs sorted by name; jobs with nothing measured are left out.

    algorithms.md §3's order of sources: the job's own attempts on a type first, else the
    attempts of jobs running the same program (image, argv, GPU count) on that type. A
    rate is total progress over total time across the attempts, so a long attempt weighs
    more than a short one. Jobs of one program without their own measurements share one
    tuple: a round converts it to speeds once.
    """
    jobs = list(jobs)
    if not jobs:
        return {}
    active = {job.job_id for job in jobs}
    own: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    by_program: dict[tuple[str, str, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0.0, 0.0])
    )
    rows = (
        JobProgress.objects.filter(
            last_at__gte=now - PROGRESS_HISTORY,
            device_type__isnull=False,
            # Narrows the read to candidate programs; the key below decides.
            job__image__in={job.image for job in jobs},
        )
        .annotate(command_text=argv_text("job__command"))
        .order_by("-last_at")
        .values_list(
            "job_id", "job__image", "command_text", "job__num_gpus", "device_type__name",
            "first_progress", "first_at", "last_progress", "last_at",
        )[:PROGRESS_ROWS]
    )  # fmt: skip
    for job_id, image, command_text, num_gpus, type_name, first, first_at, last, last_at in rows:
        span = last_at - first_at
        if span < MIN_PROGRESS_SPAN or last <= first:
            continue
        targets = [by_program[image, command_text, num_gpus][type_name]]
        if job_id in active:
            targets.append(own[job_id][type_name])
        for totals in targets:
            totals[0] += last - first
            totals[1] += span.total_seconds()

    def as_rates(totals: dict[str, list[float]]) -> dict[str, float]:
        return {name: work / seconds for name, (work, seconds) in totals.items()}

    program_rates = {
        program: tuple(sorted(as_rates(totals).items())) for program, totals in by_program.items()
    }
    rates: dict[int, tuple[tuple[str, float], ...]] = {}
    for job in jobs:
        shared = program_rates.get(job.key)
        if job.job_id in own:
            mine = {**dict(shared or ()), **as_rates(own[job.job_id])}
            rates[job.job_id] = tuple(sorted(mine.items()))
        elif shared:
            rates[job.job_id] = shared
    return rates


def job_measured_rates(*, job_id: int, now: datetime) -> dict[str, float]:
    """`measured_rates` of one job, for its page."""
    programs = [
        JobProgram(*row)
        for row in Job.objects.filter(pk=job_id)
        .annotate(command_text=argv_text())
        .values_list("id", "image", "command_text", "num_gpus")
    ]
    return dict(measured_rates(jobs=programs, now=now).get(job_id, ()))


def jobs_gpu_use(
    *, held: Mapping[int, Collection[int]], since: Mapping[int, datetime], now: datetime
) -> dict[int, float | None]:
    """Each job's mean GPU utilization (%) from `since[job]` to `now`, over the GPUs it
    holds (`held[job]`: device ids); None where none of them has a reading.

    1. Per (job, device): the mean of the job's per-minute roll-ups (JobGpuMinute),
       weighted by their samples; a job with no roll-up in its window yet (just started,
       or the roll-up has not run) falls back to its raw JobGpuSample rows.
    2. A held GPU with no process of the job on it counts as 0 %: the job holds it and
       does not use it. A job with no reading at all is not judged (its node's agent may
       not report per-job use).

    One query per distinct `since` for each source, so give many jobs one window.
    """
    use: dict[tuple[int, int], float] = {}
    windows: dict[datetime, list[int]] = defaultdict(list)
    for job_id in held:
        windows[since[job_id]].append(job_id)
    for start, job_ids in windows.items():
        rolled = (
            JobGpuMinute.objects.filter(
                job_id__in=job_ids, minute__gte=start, utilization_avg__isnull=False
            )
            .values("job_id", "device_id")
            .annotate(weighted=Sum(F("utilization_avg") * F("samples")), samples=Sum("samples"))
            .order_by()
            .values_list("job_id", "device_id", "weighted", "samples")
        )
        for job_id, device_id, weighted, samples in rolled:
            if samples:
                use[(job_id, device_id)] = weighted / samples
        found = {job_id for job_id, _ in use}
        unrolled = [job_id for job_id in job_ids if job_id not in found]
        if not unrolled:
            continue
        raw = (
            JobGpuSample.objects.filter(
                job_id__in=unrolled, at__gte=start, at__lte=now, utilization_pct__isnull=False
            )
            .values("job_id", "device_id")
            .annotate(mean=Avg("utilization_pct"))
            .order_by()
            .values_list("job_id", "device_id", "mean")
        )
        for job_id, device_id, mean in raw:
            use[(job_id, device_id)] = float(mean)
    result: dict[int, float | None] = {}
    for job_id, devices in held.items():
        readings = [use.get((job_id, device_id)) for device_id in devices]
        if not devices or all(reading is None for reading in readings):
            result[job_id] = None
        else:
            result[job_id] = sum(reading or 0.0 for reading in readings) / len(devices)
    return result
