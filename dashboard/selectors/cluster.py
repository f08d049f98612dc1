"""The cluster as it is now: nodes, their devices, who holds each one and how hard it works.

One read serves the cluster page and the cluster API, already redacted for the viewer:
admins see which job and owner hold every device; a student sees the job id only on
devices their own jobs hold, and "in use" elsewhere (never whose job it is).

The cost is a fixed handful of queries whatever the cluster's size: nodes, devices,
live allocations, the last two minutes of readings, and the last hour's hardware faults.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from accounts.models import User
from agents.models import GpuSample
from cluster.choices import DeviceKind, NodeState, node_can_drain, node_can_undrain
from cluster.models import Device, Node
from jobs.choices import HOLDING_STATES
from jobs.models import Allocation
from jobs.selectors import job_seen_by
from scheduler.selectors import devices_stopping

# The freshness the utilization aggregates use too: an older reading is "no reading".
from ..services import FRESH_READING

# Xid errors and uncorrected ECC errors this recent mark a device "check".
HEALTH_WINDOW = timedelta(hours=1)
# Nodes whose free devices nothing can use until an admin acts or the node comes back.
OUT_OF_SERVICE_STATES = frozenset({NodeState.DOWN, NodeState.DRAINED})


def age_text(seconds: float | None) -> str:
    """42 -> '42 s'; 400 -> '6 min'; 7200 -> '2 h'; 200000 -> '2 d'; None -> 'never'."""
    if seconds is None:
        return "never"
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


@dataclass(frozen=True)
class DeviceCell:
    """One device of the grid. `job_id`/`job_owner` are None unless the viewer may see them."""

    id: int
    index: int
    kind: str
    device_type: str
    model_name: str
    allocated: bool
    # Let go of by a cancelled or timed-out job whose process the node has not yet been
    # seen to stop: the scheduler starts nothing here until it has (Slurm's COMPLETING).
    stopping: bool
    # Taken out of service by an admin (`cluster.services.device_cordon`): nothing new
    # starts here; a job running here finishes. The reason says who and why.
    cordoned: bool
    cordon_reason: str
    mine: bool
    job_id: int | None
    job_owner: str | None
    reading_at: datetime | None
    utilization_pct: int | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    temperature_c: int | None
    health: list[str]

    @property
    def has_reading(self) -> bool:
        return self.reading_at is not None

    @property
    def memory_text(self) -> str:
        """'12.5 / 80 GiB', or '' without a reading."""
        if self.memory_used_mb is None or not self.memory_total_mb:
            return ""
        return f"{self.memory_used_mb / 1024:.1f} / {self.memory_total_mb / 1024:.0f} GiB"


@dataclass(frozen=True)
class NodeRow:
    id: int
    name: str
    state: str
    state_label: str
    state_reason: str
    # Where a DOWN node goes when it answers again: a drained one offers undrain.
    return_state: str
    runtime: str
    runtime_label: str
    simulated: bool
    last_heartbeat_at: datetime | None
    heartbeat_age_seconds: float | None
    devices: list[DeviceCell]

    @property
    def heartbeat_age_text(self) -> str:
        return age_text(self.heartbeat_age_seconds)

    @property
    def can_drain(self) -> bool:
        return node_can_drain(self.state, self.return_state)

    @property
    def can_undrain(self) -> bool:
        return node_can_undrain(self.state, self.return_state)


@dataclass(frozen=True)
class ClusterCounts:
    """GPUs split five ways; the parts add up to `total`.

    `allocated`: held by a job, wherever; `stopping`: let go of by a job whose process is
    still being stopped. Of the rest, `free` are on UP nodes (the scheduler can start work
    there), `out_of_service` cordoned or on DOWN or DRAINED nodes, and `held_back` on
    SUSPECT or DRAINING nodes (no new work starts there for now).
    """

    total: int
    allocated: int
    stopping: int
    free: int
    out_of_service: int
    held_back: int


@dataclass(frozen=True)
class ClusterOverview:
    as_of: datetime
    counts: ClusterCounts
    nodes: list[NodeRow]


def _latest_readings(*, now: datetime) -> dict[int, tuple]:
    """Device id -> (at, utilization %, memory used, memory total, temperature) of its newest
    sample of the last FRESH_READING (a few heartbeats per device, so a plain scan)."""
    latest: dict[int, tuple] = {}
    rows = (
        GpuSample.objects.filter(at__gte=now - FRESH_READING, at__lte=now)
        .order_by("at", "id")
        .values_list(
            "device_id",
            "at",
            "utilization_pct",
            "memory_used_mb",
            "memory_total_mb",
            "temperature_c",
        )
    )
    for device_id, *reading in rows:
        latest[device_id] = tuple(reading)
    return latest


def _health_problems(*, now: datetime) -> dict[int, list[str]]:
    """Device id -> what to check: Xid codes and uncorrected ECC errors seen recently.

    Only the faulty rows leave the database (the filter runs there), so a healthy hour
    of samples costs nothing.
    """
    xids: dict[int, set[int]] = defaultdict(set)
    ecc: dict[int, int] = {}
    rows = (
        GpuSample.objects.filter(at__gte=now - HEALTH_WINDOW, at__lte=now)
        .filter(Q(ecc_uncorrected__gt=0) | ~Q(xid_errors=[]))
        .values_list("device_id", "xid_errors", "ecc_uncorrected")
    )
    for device_id, codes, uncorrected in rows:
        if isinstance(codes, list):
            xids[device_id].update(code for code in codes if isinstance(code, int))
        if uncorrected:
            ecc[device_id] = max(ecc.get(device_id, 0), uncorrected)
    problems: dict[int, list[str]] = defaultdict(list)
    for device_id, codes in xids.items():
        if codes:
            problems[device_id].append("Xid " + ", ".join(str(code) for code in sorted(codes)))
    for device_id, count in ecc.items():
        problems[device_id].append(f"{count} uncorrected ECC error{'s' if count != 1 else ''}")
    return problems


def cluster_overview(*, viewer: User, now: datetime | None = None) -> ClusterOverview:
    """Every node with its devices, redacted for `viewer`, and the GPU counts.

    1. Nodes, devices (with their type), live allocations (with job owner) and devices
       still stopping an ended job's process: four reads.
    2. The newest reading of each device from the last FRESH_READING, and the Xid/ECC
       faults of the last HEALTH_WINDOW: two reads.
    3. Each device cell shows the holding job only to an admin or to the job's owner.
    """
    now = now or timezone.now()
    nodes = list(
        Node.objects.order_by("name").only(
            "id",
            "name",
            "state",
            "state_reason",
            "return_state",
            "runtime",
            "simulated",
            "last_heartbeat_at",
        )
    )
    devices_by_node: dict[int, list[Device]] = defaultdict(list)
    for device in Device.objects.select_related("device_type").order_by("node_id", "index"):
        devices_by_node[device.node_id].append(device)
    holders = {
        device_id: (job_id, owner_id, owner_name, group_id)
        for device_id, job_id, owner_id, owner_name, group_id in Allocation.objects.filter(
            ended_at__isnull=True, job__state__in=HOLDING_STATES
        ).values_list(
            "device_id", "job_id", "job__owner_id", "job__owner__username", "job__group_id"
        )
    }
    stopping = devices_stopping(now=now)
    readings = _latest_readings(now=now)
    problems = _health_problems(now=now)

    total = allocated = stopping_count = free = out_of_service = held_back = 0
    rows = []
    for node in nodes:
        cells = []
        for device in devices_by_node.get(node.pk, []):
            holder = holders.get(device.pk)
            mine = holder is not None and holder[1] == viewer.pk
            visible = holder is not None and job_seen_by(
                viewer, owner_id=holder[1], group_id=holder[3]
            )
            reading = readings.get(device.pk)
            cells.append(
                DeviceCell(
                    id=device.pk,
                    index=device.index,
                    kind=device.kind,
                    device_type=device.device_type.name,
                    model_name=device.model_name,
                    allocated=holder is not None,
                    stopping=holder is None and device.pk in stopping,
                    cordoned=device.cordoned_at is not None,
                    cordon_reason=device.cordon_reason,
                    mine=mine,
                    job_id=holder[0] if visible else None,
                    job_owner=holder[2] if visible else None,
                    reading_at=reading[0] if reading else None,
                    utilization_pct=reading[1] if reading else None,
                    memory_used_mb=reading[2] if reading else None,
                    memory_total_mb=(reading[3] if reading else None) or device.memory_mb or None,
                    temperature_c=reading[4] if reading else None,
                    health=problems.get(device.pk, []),
                )
            )
            if device.kind != DeviceKind.GPU:
                continue
            total += 1
            if holder is not None:
                allocated += 1
            elif device.pk in stopping:
                stopping_count += 1
            elif node.state == NodeState.UP and device.cordoned_at is None:
                free += 1
            elif node.state in OUT_OF_SERVICE_STATES or device.cordoned_at is not None:
                out_of_service += 1
            else:
                held_back += 1
        heartbeat = node.last_heartbeat_at
        rows.append(
            NodeRow(
                id=node.pk,
                name=node.name,
                state=node.state,
                state_label=NodeState(node.state).label,
                state_reason=node.state_reason,
                return_state=node.return_state,
                runtime=node.runtime,
                runtime_label=node.get_runtime_display(),
                simulated=node.simulated,
                last_heartbeat_at=heartbeat,
                heartbeat_age_seconds=(
                    max(0.0, (now - heartbeat).total_seconds()) if heartbeat else None
                ),
                devices=cells,
            )
        )
    return ClusterOverview(
        as_of=now,
        counts=ClusterCounts(
            total=total,
            allocated=allocated,
            stopping=stopping_count,
            free=free,
            out_of_service=out_of_service,
            held_back=held_back,
        ),
        nodes=rows,
    )
