"""Simulated node agents for the demo: they "run" jobs on nodes marked `simulated`.

They drive jobs through the same state-machine services a real agent's reports do
(STARTING → RUNNING → SUCCEEDED, PREEMPTING → PENDING after the grace period, or
SUCCEEDED if the job's work is done within it), so the demo exercises the real scheduler
and bookkeeping; only the container is imaginary.

How long a simulated job runs: `sleep N` runs N seconds; anything else runs
`DEFAULT_DURATION_SECONDS`. Progress survives preemption (it resumes from a checkpoint),
measured by the job's total time on devices.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from cluster.models import Node
from config.errors import ApplicationError
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_finish, job_mark_running, job_requeue

from .node_agent.collector import NvmlCollector
from .node_agent.simnvml import SimGpu, SimProcess, SimulatedNvml

logger = logging.getLogger(__name__)

DEFAULT_DURATION_SECONDS = 300.0


def simulated_duration(command: list[str]) -> float:
    """Seconds a simulated job needs on its devices."""
    if len(command) == 2 and command[0] in {"sleep", "/bin/sleep"}:
        try:
            return max(float(command[1]), 0.0)
        except ValueError:
            pass
    return DEFAULT_DURATION_SECONDS


def simulated_launch(*, job_id: int) -> None:
    """The container 'starts' at once."""
    try:
        job_mark_running(job_id=job_id, message="Simulated agent: running.")
    except ApplicationError as exc:  # cancelled or otherwise moved on meanwhile
        logger.info("Simulated launch of job %s skipped: %s", job_id, exc)


def simulated_tick(*, grace_seconds: float) -> int:
    """Advance every simulated job: finish those done, requeue preempted ones. Returns changes.

    1. RUNNING and PREEMPTING jobs whose time on devices (stored + current run) reaches
       their duration exit with code 0.
    2. Other PREEMPTING jobs whose grace period has passed are requeued (checkpoint taken).
    3. STARTING jobs whose launch was missed (e.g. a restart) are marked running.
    """
    now = timezone.now()
    simulated = Q(allocations__ended_at__isnull=True, allocations__device__node__simulated=True)
    changes = 0
    active = (
        Job.objects.filter(
            simulated, state__in=(JobState.RUNNING, JobState.PREEMPTING, JobState.STARTING)
        )
        .distinct()
        .values("id", "state", "command", "total_run_seconds", "started_at", "updated_at")
    )
    for row in active:
        try:
            if row["state"] == JobState.STARTING:
                job_mark_running(job_id=row["id"], message="Simulated agent: running.")
            elif _work_done(row, now=now, grace_seconds=grace_seconds):
                # Also during a preemption's grace period: the program keeps running until
                # it is killed, and one that completes meanwhile exits 0 like a real one
                # (PREEMPTING → SUCCEEDED) instead of being requeued to run for 0 s.
                done = "done" if row["state"] == JobState.RUNNING else "done while preempted"
                job_finish(job_id=row["id"], exit_code=0, message=f"Simulated agent: {done}.")
            elif row["state"] == JobState.RUNNING:
                continue
            elif now - row["updated_at"] >= timedelta(seconds=grace_seconds):
                job_requeue(job_id=row["id"], message="Checkpointed after preemption; requeued.")
            else:
                continue
        except ApplicationError as exc:
            logger.info("Simulated agent left job %s alone: %s", row["id"], exc)
            continue
        changes += 1
    return changes


def _work_done(row: dict[str, Any], *, now: datetime, grace_seconds: float) -> bool:
    """Whether a RUNNING or PREEMPTING job's time on devices (stored + current run) has
    reached its duration. A PREEMPTING job runs until its grace period ends at the latest
    (then it is killed), however late this tick comes."""
    current_run = 0.0
    if row["started_at"]:
        run_until = now
        if row["state"] == JobState.PREEMPTING:
            run_until = min(now, row["updated_at"] + timedelta(seconds=grace_seconds))
        current_run = max((run_until - row["started_at"]).total_seconds(), 0.0)
    return row["total_run_seconds"] + current_run >= simulated_duration(row["command"])


# --------------------------------------------------------------------------- heartbeats
# The demo's nodes report like real ones: the real agent's collector (NvmlCollector) reads
# a simulated NVML built from the node's devices and the jobs holding them, and the result
# goes through the same service the heartbeat endpoint calls.

HEARTBEAT_SECONDS = 10.0
# Simulated jobs report progress (GPULAB_PROGRESS_FILE) as if they did this many steps per
# second on a device of speed 1.0, so per-device-type rates come out proportional to speed.
STEPS_PER_SECOND_AT_SPEED_1 = 100.0

Attempt = tuple[int, int]  # (job_id, attempt)


def _simulated_nvml(
    node: Node, now: datetime
) -> tuple[SimulatedNvml, dict[int, Attempt], dict[Attempt, float]]:
    """The node's simulated NVML, pid → owning attempt, and each attempt's progress."""
    holders: dict[int, Attempt] = {}
    progress: dict[Attempt, float] = {}
    for device_id, job_id, attempt, started_at, speed in Allocation.objects.filter(
        ended_at__isnull=True, device__node=node, job__state=JobState.RUNNING
    ).values_list("device_id", "job_id", "attempt", "started_at", "device__device_type__speed"):
        holders[device_id] = (job_id, attempt)
        steps = max((now - started_at).total_seconds(), 0.0) * speed * STEPS_PER_SECOND_AT_SPEED_1
        # On mixed devices the slowest one paces a synchronous job.
        progress[job_id, attempt] = min(progress.get((job_id, attempt), steps), steps)
    gpus, owners = [], {}
    for device in node.devices.order_by("index"):
        gpu = SimGpu(
            uuid=device.uuid,
            name=device.model_name or f"NVIDIA {device.device_type.name.upper()}",
            memory_total_mb=device.memory_mb or 16384,
        )
        holder = holders.get(device.pk)
        if holder is not None:
            # Busy GPUs hum between 70 and 99 %, varying with time and job: plausible
            # charts, and the same numbers for the same moment.
            wobble = (holder[0] * 7919 + int(now.timestamp()) // 10) % 30
            pid = 100_000 + holder[0] * 10 + device.index
            gpu.utilization_pct = 70 + wobble
            gpu.memory_used_mb = gpu.memory_total_mb * (50 + wobble) // 100
            gpu.temperature_c = 55 + wobble // 2
            gpu.power_mw = (150 + 5 * wobble) * 1000
            gpu.processes = [SimProcess(pid=pid, usedGpuMemory=gpu.memory_used_mb * 1024 * 1024)]
            owners[pid] = holder
        gpus.append(gpu)
    return SimulatedNvml(gpus), owners, progress


def simulated_report(*, node: Node, now: datetime) -> dict[str, Any]:
    """The heartbeat a real agent on this node would send now."""
    nvml, owners, progress = _simulated_nvml(node, now)
    collector = NvmlCollector(
        nvml,
        job_of=owners.get,
        progress_of=lambda pid, job_id, attempt: progress.get((job_id, attempt)),
    )
    return collector.collect()


def simulated_heartbeats(*, now: datetime | None = None) -> int:
    """Every simulated node whose last heartbeat is 10 s old reports one. Returns how many."""
    from .heartbeats import agent_heartbeat_record

    now = now or timezone.now()
    due = Node.objects.filter(simulated=True).filter(
        Q(last_heartbeat_at__isnull=True)
        | Q(last_heartbeat_at__lte=now - timedelta(seconds=HEARTBEAT_SECONDS))
    )
    sent = 0
    for node in due:
        report = simulated_report(node=node, now=now)
        agent_heartbeat_record(node=node, heartbeat=report, now=now)
        sent += 1
    return sent
