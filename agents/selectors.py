"""Reads for the agents: which attempts should be running where."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cluster.choices import NodeState
from cluster.models import Device, Node
from jobs.choices import HOLDING_STATES, JobState
from jobs.models import Allocation


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
