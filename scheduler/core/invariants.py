"""Invariants every round's decisions must satisfy before anything is applied.

algorithms.md §0: no device given to two jobs, gang jobs get all or nothing, a job only gets
device types it accepts, quotas hold. A violation is a bug in a policy or a placer, never a
user error, so it raises instead of returning a status: the round is dropped and nothing
half-applied reaches the database or the agents.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from scheduler.core.types import (
    Consolidation,
    Decisions,
    Job,
    JobPhase,
    Quota,
    Snapshot,
    StoppingJob,
)


class InvariantViolation(AssertionError):
    """Decisions that must never be applied."""


def _fail(message: str) -> None:
    raise InvariantViolation(message)


def check_decisions(snapshot: Snapshot, decisions: Decisions) -> None:
    """Raise `InvariantViolation` unless `decisions` are safe to apply to `snapshot`.

    Checks:
    1. Every decision names a known job, and no job gets two decisions (start/preempt/hold).
    2. Starts are for pending jobs, preemptions for running jobs, holds for pending jobs;
       every pending job that does not start is held (so users always see a reason).
    3. A preempted job is preemptible (or reclaimable, for another job), past its
       minimum runtime, and no longer starting.
    4. A start gets exactly `num_gpus` distinct, known, schedulable devices of accepted
       types on schedulable nodes, none busy, none held by a running job that keeps running, none
       given to another start; `required` consolidation stays on one node.
    5. Quotas hold after the round for every account that starts a job (running jobs over a
       lowered quota are never preempted for it, so only accounts that grow are checked);
       a job preempted this round still counts against its owner's and group's quotas.
    6. Queue changes name known jobs and existing queues; `order` lists each active job once.
    """
    jobs = snapshot.job_by_id
    running_phase = JobPhase.RUNNING
    running = {job.id for job in snapshot.jobs if job.phase is running_phase}
    start_ids = [start.job_id for start in decisions.starts]
    preempt_ids = [preempt.job_id for preempt in decisions.preemptions]
    hold_ids = [hold.job_id for hold in decisions.holds]
    decided = [*start_ids, *preempt_ids, *hold_ids]
    decided_set = set(decided)
    if len(decided_set) != len(decided):
        twice = sorted(job_id for job_id, n in Counter(decided).items() if n > 1)
        _fail(f"jobs {twice} have more than one decision")
    unknown = decided_set.difference(jobs)
    if unknown:
        _fail(f"decisions for unknown jobs {sorted(unknown)}")

    settings = snapshot.settings
    preempted = set(preempt_ids)
    preempted_by = {preempt.job_id: preempt.by_job_id for preempt in decisions.preemptions}
    for job_id in preempt_ids:
        job = jobs[job_id]
        if job_id not in running:
            _fail(f"job {job_id} is preempted but not running")
        if not job.preemptible and not (job.reclaimable and preempted_by[job_id] is not None):
            # A reclaimable job only for another job (a guarantee's reclaim), never moved.
            _fail(f"job {job_id} is preempted but not preemptible")
        if job.started_at is not None and snapshot.now - job.started_at < settings.min_runtime:
            _fail(f"job {job_id} is preempted inside its minimum runtime")
        if job.starting:
            # The job state machine preempts only RUNNING jobs: the apply step would drop it.
            _fail(f"job {job_id} is preempted while it is still starting")

    # Devices of jobs preempted this round may be reused at once: the apply step waits for
    # the checkpoint-and-kill before launching (algorithms.md section 1, preemption cost).
    held_by_running: dict[int, int] = {}
    for job_id in running.difference(preempted):
        for device_id in jobs[job_id].devices:
            held_by_running[device_id] = job_id

    started = set(start_ids)
    if started & running:
        _fail(f"jobs {sorted(started & running)} are started but already running")
    given: dict[int, int] = {}
    for start in decisions.starts:
        _check_start(snapshot, jobs[start.job_id], start.device_ids, held_by_running, given)

    held = set(hold_ids)
    if held & running:
        _fail(f"jobs {sorted(held & running)} are held but running")
    # A pending job without a decision would have no "why is my job pending" answer
    # (product.md, the first user need), so silence is a bug too.
    silent = set(jobs).difference(running, started, held)
    if silent:
        _fail(f"pending jobs {sorted(silent)} neither start nor are held")

    _check_quotas(snapshot, decisions)

    queues = len(settings.queue_thresholds) + 1
    for change in decisions.queue_changes:
        if change.job_id not in jobs:
            _fail(f"queue change for unknown job {change.job_id}")
        if not 0 <= change.level < queues:
            _fail(f"job {change.job_id} moved to queue {change.level} of {queues}")
    if decisions.order and (len(decisions.order) != len(jobs) or set(decisions.order) != set(jobs)):
        _fail("order does not list every active job exactly once")


def _check_start(
    snapshot: Snapshot,
    job: Job,
    device_ids: tuple[int, ...],
    held_by_running: dict[int, int],
    given: dict[int, int],
) -> None:
    if len(device_ids) != job.num_gpus or len(set(device_ids)) != len(device_ids):
        _fail(f"job {job.id} needs {job.num_gpus} distinct devices, got {device_ids}")
    nodes_used: set[str] = set()
    for device_id in device_ids:
        device = snapshot.device_by_id.get(device_id)
        if device is None:
            _fail(f"job {job.id} is given unknown device {device_id}")
            return
        if job.accepted_types and device.device_type not in job.accepted_types:
            _fail(f"job {job.id} is given a {device.device_type}, not one it accepts")
        node = snapshot.node_by_name.get(device.node)
        if node is not None and not node.schedulable:
            _fail(f"job {job.id} is started on unschedulable node {device.node}")
        if not device.schedulable:
            _fail(f"job {job.id} is started on unschedulable device {device_id}")
        if device_id in snapshot.busy_device_ids:
            _fail(f"job {job.id} is given busy device {device_id}")
        if device_id in held_by_running:
            _fail(f"job {job.id} is given device {device_id} of job {held_by_running[device_id]}")
        if device_id in given:
            _fail(f"device {device_id} is given to jobs {given[device_id]} and {job.id}")
        given[device_id] = job.id
        nodes_used.add(device.node)
    if job.consolidation is Consolidation.REQUIRED and len(nodes_used) > 1:
        _fail(f"job {job.id} requires one node but spans {sorted(nodes_used)}")


def _accounts(job: Job | StoppingJob) -> tuple[tuple[str, str], ...]:
    return (
        (("user", job.user),) if job.group is None else (("user", job.user), ("group", job.group))
    )


def _has_quota(snapshot: Snapshot, kind: str, name: str) -> bool:
    registry = snapshot.user_by_name if kind == "user" else snapshot.group_by_name
    account = registry.get(name)
    return account is not None and account.quota != Quota()


def _check_quotas(snapshot: Snapshot, decisions: Decisions) -> None:
    jobs = snapshot.job_by_id
    started = {start.job_id: start.device_ids for start in decisions.starts}
    # Only accounts that start something and have a quota can break one this round.
    growing = {
        account
        for job_id in started
        for account in _accounts(jobs[job_id])
        if _has_quota(snapshot, *account)
    }
    if not growing:
        return
    gpus: Counter[tuple[str, str]] = Counter()
    running_jobs: Counter[tuple[str, str]] = Counter()
    gpus_by_type: defaultdict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    # A per-type limit an account was already over (lowered by an admin) only matters for
    # the types its starts add to.
    grown_types: set[tuple[tuple[str, str], str]] = set()
    # A job preempted this round still counts: it checkpoints on its GPUs through the grace
    # period, so its owner may not start another job beside it (`StoppingJob`).
    for job in snapshot.jobs:
        if job.phase is JobPhase.RUNNING:
            device_ids = job.devices
        elif job.id in started:
            device_ids = started[job.id]
        else:
            continue
        for account in _accounts(job):
            if account not in growing:
                continue
            gpus[account] += len(device_ids)
            running_jobs[account] += 1
            for device_id in device_ids:
                device = snapshot.device_by_id.get(device_id)
                if device is not None:
                    gpus_by_type[account][device.device_type] += 1
                    if job.id in started:
                        grown_types.add((account, device.device_type))
    # A job checkpointing after a preemption still holds its devices, and they count.
    for stopping in snapshot.stopping_jobs:
        for account in _accounts(stopping):
            if account not in growing:
                continue
            gpus[account] += len(stopping.devices)
            running_jobs[account] += 1
            for device_id in stopping.devices:
                device = snapshot.device_by_id.get(device_id)
                if device is not None:
                    gpus_by_type[account][device.device_type] += 1
    for kind, name in sorted(growing):
        registry = snapshot.user_by_name if kind == "user" else snapshot.group_by_name
        account = registry.get(name)
        if account is None:
            continue
        quota: Quota = account.quota
        key = (kind, name)
        if quota.max_gpus is not None and gpus[key] > quota.max_gpus:
            _fail(f"{kind} {name} uses {gpus[key]} GPUs over its quota of {quota.max_gpus}")
        if quota.max_running_jobs is not None and running_jobs[key] > quota.max_running_jobs:
            _fail(f"{kind} {name} runs {running_jobs[key]} jobs over {quota.max_running_jobs}")
        for device_type, limit in quota.max_gpus_by_type:
            if (key, device_type) in grown_types and gpus_by_type[key][device_type] > limit:
                _fail(f"{kind} {name} uses over {limit} {device_type} GPUs")
