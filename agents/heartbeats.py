"""Heartbeats from node agents: tokens, recording a heartbeat, and metric retention.

Services (writes) of the agents app, kept apart from `services.py` (SSH launching) because
nothing here talks to a node: a heartbeat arrives over HTTP and only rows change.

Retention: raw samples for `RAW_RETENTION` (24 h), per-minute roll-ups for
`MINUTE_RETENTION` (30 days). Per-job use (`JobGpuSample`) is stored apart from
allocation (`jobs.Allocation`): a job can hold a GPU and leave it idle.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Avg, Count, Max
from django.db.models.functions import TruncMinute
from django.utils import timezone

from accounts.models import AuditEntry, User
from accounts.services import audit_entries_write, token_digest
from cluster.choices import DeviceKind, NodeState
from cluster.models import Device, DeviceType, Node
from cluster.services import node_drain
from config.errors import Conflict, NotFound
from jobs.choices import JobState
from jobs.models import Allocation

from .models import (
    PG_INT_MAX,
    GpuMinute,
    GpuSample,
    JobGpuMinute,
    JobGpuSample,
    JobProgress,
    NodeAgentToken,
)
from .selectors import PROGRESS_HISTORY
from .services import (
    node_heartbeat_seen,
    node_reason_on_return,
    reason_fit,
    ssh_dispatch_enabled,
)
from .webhooks import node_event_notify

logger = logging.getLogger(__name__)

RAW_RETENTION = timedelta(hours=24)
MINUTE_RETENTION = timedelta(days=30)
TOKEN_PREFIX = "gpn_"

# Xid codes a user's own program causes (NVIDIA's Xid catalog: "application errors";
# NVIDIA's Kubernetes device plugin skips the same ones): the GPU is still healthy, so
# they are recorded and shown but do not drain the node, or any student could drain any
# node with an out-of-bounds kernel. 13 graphics engine exception, 31 GPU memory page
# fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video processor exception.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})
# How a hardware fault starts a node's reason: `node_drain`'s own wording for a drain no
# admin asked for, the same whatever state the node was in when it was reported.
FAULT_REASON_PREFIX = "Drained: "


def node_agent_token_create(
    *, node_id: int, revoke_others: bool = True
) -> tuple[NodeAgentToken, str]:
    """A new agent token for the node; the key is shown only once.

    Older tokens are revoked with it, unless `revoke_others` is False: the bootstrap keeps
    the running agent's token until the new agent has started (`node_agent_tokens_replaced`).
    """
    if not Node.objects.filter(pk=node_id).exists():
        raise NotFound(f"Node {node_id} does not exist.")
    key = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        if revoke_others:
            NodeAgentToken.objects.filter(node_id=node_id, revoked_at__isnull=True).update(
                revoked_at=timezone.now()
            )
        token = NodeAgentToken.objects.create(node_id=node_id, digest=token_digest(key))
    return token, key


def node_agent_tokens_replaced(*, token: NodeAgentToken) -> int:
    """`token` is now the node's only live one: revoke the others. Returns how many."""
    return (
        NodeAgentToken.objects.filter(node_id=token.node_id, revoked_at__isnull=True)
        .exclude(pk=token.pk)
        .update(revoked_at=timezone.now())
    )


@transaction.atomic
def node_agent_tokens_revoke(*, token_ids: Iterable[int], by: User | None = None) -> int:
    """Revoke these agent tokens (a node's agent then gets 401 until it has a new one);
    already revoked ones keep their time. Returns how many were revoked now.

    `by` (an admin) puts each revocation in the audit log, as drains are; a bootstrap
    replacing its own older tokens passes nobody.
    """
    now = timezone.now()
    tokens = list(
        NodeAgentToken.objects.select_for_update()
        .select_related("node")
        .filter(pk__in=list(token_ids), revoked_at__isnull=True)
        .order_by("pk")
    )
    NodeAgentToken.objects.filter(pk__in=[token.pk for token in tokens]).update(revoked_at=now)
    if by is not None:
        for token in tokens:
            revoked = f"token {token.pk} (created {token.created_at:%Y-%m-%d %H:%M})"
            audit_entries_write(
                actor=by,
                target_kind=AuditEntry.TargetKind.AGENT_TOKEN,
                target_name=token.node.name,
                changes={"revoked_at": ("", revoked)},
            )
    return len(tokens)


def node_agent_token_check(*, key: str) -> Node | None:
    """The node a (non-revoked) agent token belongs to, or None."""
    token = (
        NodeAgentToken.objects.select_related("node")
        .filter(digest=token_digest(key), revoked_at__isnull=True)
        .first()
    )
    return token.node if token else None


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _names_type(model_words: list[str], type_name: str) -> bool:
    """Whether the type's name is whole words of the model's: `a100` in "NVIDIA
    A100-SXM4-80GB", `rtx4090` in "NVIDIA GeForce RTX 4090"; not `l4` in "NVIDIA L40S",
    `p4` in "Tesla P40" or `a10` in "NVIDIA A100-SXM4-80GB"."""
    wanted = "".join(_words(type_name))
    if not wanted:
        return False
    for start in range(len(model_words)):
        joined = ""
        for word in model_words[start:]:
            joined += word
            if joined == wanted:
                return True
            if not wanted.startswith(joined):
                break
    return False


def _device_type_for(model_name: str) -> DeviceType:
    """The device type whose name is whole words of NVML's model name (`_names_type`),
    longest match first; otherwise a new type at speed 1.0 for an admin to adjust."""
    model_words = _words(model_name)
    for device_type in sorted(DeviceType.objects.all(), key=lambda t: (-len(t.name), t.name)):
        if _names_type(model_words, device_type.name):
            return device_type
    lowered = model_name.lower()
    slug = re.sub(r"[^a-z0-9]+", "-", lowered.replace("nvidia", "")).strip("-")[:32] or "gpu"
    device_type, _ = DeviceType.objects.get_or_create(
        name=slug, defaults={"display_name": model_name[:64], "speed": 1.0}
    )
    return device_type


def _register_devices(node: Node, gpus: list[dict[str, Any]], now: datetime) -> dict[str, Device]:
    """Devices register themselves by UUID: created, updated, or moved into their slot.

    A node's token speaks only for that node, so a GPU registered on another node moves
    here only while that node cannot be using it (DOWN or DRAINED, no live allocation):
    otherwise one node's agent could take over another's GPUs and report for its jobs.
    A GPU that takes an occupied slot retires the one it replaced (history kept), unless
    that one is still allocated to a job.
    """
    devices: dict[str, Device] = {}
    # NVML numbers the GPUs it sees from 0, so when one is gone the ones after it report
    # lower indexes. Then registered GPUs keep their slots: the gone one is not taken for
    # replaced (retired) but stays, missing, and the node drains for it (`_hardware_faults`).
    reported = {gpu["uuid"] for gpu in gpus}
    renumbered = (
        Device.objects.filter(node=node, kind=DeviceKind.GPU).exclude(uuid__in=reported).exists()
    )
    for gpu in gpus:
        uuid, index, name = gpu["uuid"], gpu["index"], gpu["name"][:128]
        # No GPU has 0 MiB: 0 (or null) is a memory NVML could not read this time (the
        # collector's "no reading"), which must not overwrite the size registered.
        memory_mb = gpu["memory_total_mb"] or None
        if gpu["lost"]:
            # Nothing about it can be read (not even its memory): only a GPU already
            # registered here is known, as it was; the fault drains the node.
            lost = Device.objects.filter(node=node, uuid=uuid).first()
            if lost is not None:
                devices[uuid] = lost
            continue
        device = Device.all_objects.select_related("node").filter(uuid=uuid).first()
        if device is not None and device.node_id != node.pk:
            _check_movable(device, to_node=node)
        elif renumbered and device is not None and device.retired_at is None:
            index = device.index
        # Locked, so a round allocating it now either commits first (and the check below
        # sees its allocation) or waits until the slot's new GPU is recorded.
        occupant = (
            Device.objects.select_for_update()
            .filter(node=node, index=index)
            .exclude(uuid=uuid)
            .first()
        )
        if occupant is not None:
            if Allocation.objects.filter(device=occupant, ended_at__isnull=True).exists():
                raise Conflict(
                    f"GPU {index} of node {node.name} is reported as {uuid}, but "
                    f"{occupant.uuid} in that slot is still allocated to a job; it can be "
                    "replaced once the job has ended."
                )
            Device.objects.filter(pk=occupant.pk).update(retired_at=now)
        if device is None:
            device = Device.objects.create(
                node=node,
                index=index,
                uuid=uuid,
                model_name=name,
                device_type=_device_type_for(gpu["name"]),
                memory_mb=memory_mb or 0,  # the model's "unknown"
            )
        elif (
            device.node_id != node.pk
            or device.index != index
            or device.model_name != name
            or (memory_mb is not None and device.memory_mb != memory_mb)
            or device.retired_at is not None
        ):
            Device.all_objects.filter(pk=device.pk).update(
                node=node,
                index=index,
                model_name=name,
                memory_mb=device.memory_mb if memory_mb is None else memory_mb,
                retired_at=None,
            )
        devices[uuid] = device
    return devices


def _check_movable(device: Device, *, to_node: Node) -> None:
    """Refuse moving `device` to `to_node` while its own node may be using it."""
    held = Allocation.objects.filter(device=device, ended_at__isnull=True).exists()
    if device.retired_at is None and (
        held or device.node.state not in (NodeState.DOWN, NodeState.DRAINED)
    ):
        raise Conflict(
            f"GPU {device.uuid} is registered on node {device.node.name} "
            f"({device.node.state}{', allocated to a job' if held else ''}). To move it to "
            f"{to_node.name}, drain {device.node.name} until its jobs have ended, or let it "
            "go down, first."
        )


def _hardware_faults(node: Node, gpus: list[dict[str, Any]], devices: dict[str, Device]) -> str:
    """Why the node must drain, or "".

    A GPU NVML lost; a hardware Xid error (not one of APPLICATION_XIDS); uncorrected ECC
    errors that grew; or a GPU registered here that the agent no longer reports at all
    (fallen off the bus before the agent started, or removed: Slurm drains a node whose
    GPU count drops the same way; an admin retires a removed GPU in the Django admin).
    Not a GPU an admin cordoned: it is out of service already, and its node may serve
    with the others (`cluster.services.device_cordon`); its readings are still recorded.
    """
    # Few GPUs per node: one indexed query each for the last ECC count.
    previous = {
        device.pk: GpuSample.objects.filter(device=device)
        .order_by("-at")
        .values_list("ecc_uncorrected", flat=True)
        .first()
        for device in devices.values()
    }
    faults = []
    for gpu in gpus:
        registered = devices.get(gpu["uuid"])  # a GPU lost before it registered is not
        if registered is not None and registered.cordoned_at is not None:
            continue
        where = f"GPU {gpu['index']} ({gpu['uuid']})"
        codes = ", ".join(str(code) for code in gpu["xid_errors"])
        if gpu["lost"]:
            seen = f" (Xid {codes})" if codes else ""
            faults.append(f"{where} is lost: NVML cannot reach it{seen}")
            continue
        if any(code not in APPLICATION_XIDS for code in gpu["xid_errors"]):
            faults.append(f"Xid {codes} on {where}")
        ecc, before = gpu["ecc_uncorrected"], previous.get(devices[gpu["uuid"]].pk)
        if ecc and ecc > (before or 0):
            faults.append(f"{ecc} uncorrected ECC errors on {where}")
    reported = {gpu["uuid"] for gpu in gpus}
    for index, uuid in (
        Device.objects.filter(node=node, kind=DeviceKind.GPU, cordoned_at__isnull=True)
        .exclude(uuid__in=reported)
        .order_by("index")
        .values_list("index", "uuid")
    ):
        faults.append(f"GPU {index} ({uuid}) is missing from the agent's report")
    return "; ".join(faults)


def agent_heartbeat_record(
    *, node: Node, heartbeat: dict[str, Any], now: datetime | None = None
) -> dict[str, Any]:
    """Record one validated heartbeat from `node`'s agent.

    1. Liveness: the node was seen (SUSPECT → UP; a DOWN node is reconciled over SSH
       first, see `agents.services.node_return_reconcile`).
    2. Node facts (driver, CUDA) into its labels; GPUs register themselves by UUID.
    3. Hardware faults (Xid, growing uncorrected ECC) drain the node with the reason.
    4. One GpuSample per GPU, and one JobGpuSample per job using a GPU — counted only for
       a job that really holds a live allocation of that GPU, so an agent cannot charge
       use to arbitrary jobs.
    5. Jobs' own progress readings (`jobs`), under the same rule: only for an attempt that
       holds a live allocation on this node (`_record_progress`).
    """
    now = now or timezone.now()
    gpus = heartbeat["gpus"]
    with transaction.atomic():
        needs_reconcile = node_heartbeat_seen(node_id=node.pk, now=now)
        labels = dict(node.labels) if isinstance(node.labels, dict) else {}
        labels.update(
            driver_version=heartbeat.get("driver_version", ""),
            cuda_version=heartbeat.get("cuda_version", ""),
        )
        Node.objects.filter(pk=node.pk).update(labels=labels)
        devices = _register_devices(node, gpus, now)
        fault = _hardware_faults(node, gpus, devices)
        GpuSample.objects.bulk_create(
            GpuSample(
                device=devices[gpu["uuid"]],
                at=now,
                utilization_pct=gpu["utilization_pct"],
                memory_used_mb=gpu["memory_used_mb"],
                memory_total_mb=gpu["memory_total_mb"] or 0,  # 0: not read (see above)
                temperature_c=gpu["temperature_c"],
                power_w=gpu["power_w"],
                ecc_uncorrected=gpu["ecc_uncorrected"],
                xid_errors=gpu["xid_errors"],
            )
            for gpu in gpus
            if not gpu["lost"]  # no readings; the drain reason says what happened
        )
        JobGpuSample.objects.bulk_create(_job_samples(gpus, devices, now))
        progress_recorded = _record_progress(node, heartbeat.get("jobs", []), now)
        if fault:
            _hardware_fault_record(node, fault)
        _reconcile_on_commit(node, needs_reconcile)
    return {
        "recorded_gpus": len(gpus),
        "recorded_progress": progress_recorded,
        "drained": bool(fault),
        "reconcile": needs_reconcile,
    }


# The start of each part `_hardware_faults` writes ("Xid 79 on GPU 0 (GPU-…) ", "GPU 1
# (GPU-…) is missing …"): how the faults in front of a reason are told from the reason
# they were put in front of. A part `reason_fit` cut ends with "…".
_FAULT_PART = re.compile(r"(Xid [0-9, ]+ on |[0-9]+ uncorrected ECC errors on )?GPU [0-9]+ \(")
_CUT = "…"


def _recorded_faults(reason: str) -> tuple[list[str], str]:
    """The fault parts at the front of `reason`, and the rest: who drained the node and
    why, before a fault was put in front of it ("" for a node a fault drained)."""
    if not reason.startswith(FAULT_REASON_PREFIX):
        return [], reason
    pieces = reason.removeprefix(FAULT_REASON_PREFIX).split("; ")
    count = 0
    for piece in pieces:
        if not (_FAULT_PART.match(piece) or piece.endswith(_CUT)):
            break
        count += 1
        if piece.endswith(_CUT):
            break  # only the last fault part is ever cut
    return pieces[:count], "; ".join(pieces[count:])


def _is_recorded(part: str, recorded: list[str]) -> bool:
    return any(
        part == old or (old.endswith(_CUT) and part.startswith(old.removesuffix(_CUT)))
        for old in recorded
    )


def _with_fault(reason: str, fault: str) -> str:
    """`reason` with the parts of `fault` it does not name yet among the faults in front
    of it, the rest kept: who drained the node and why.

    `fault` is every fault of one heartbeat, joined with "; ": a lost or missing GPU is
    in every one, an Xid only in the heartbeat after it happened, so each part counts
    once, however the heartbeats mix them. Where 255 characters cannot hold them all,
    the faults' text is cut, not who drained the node (`reason_fit`). New parts go after
    the ones recorded: a cut then drops only parts that were never shown, and the next
    heartbeat's cut is the same, where new parts in front would push a recorded one out
    and back in at every heartbeat that alternates.
    """
    recorded, rest = _recorded_faults(reason)
    new = [part for part in fault.split("; ") if not _is_recorded(part, recorded)]
    if not new:
        return reason
    faults = FAULT_REASON_PREFIX + "; ".join([*recorded, *new])
    # "Drained: …" at least: the prefix is how the next heartbeat finds the faults.
    return reason_fit(faults, "; " if rest else "", rest, front_min=len(FAULT_REASON_PREFIX) + 1)


def _hardware_fault_record(node: Node, fault: str) -> None:
    """Drain the node for `fault`, or, where it is out of service already, keep the fault
    in its reason: the agent forgets an Xid once delivered, so a fault dropped here would
    be gone, and the faulty GPU back in service at the next undrain or return.

    1. UP or SUSPECT: drained for it (`node_drain`).
    2. DOWN and to come back by itself (return reconcile): it returns DRAINED, with the
       fault in front of the reason it returns with (`node_reason_on_return`).
    3. DRAINING, DRAINED, or an admin's DOWN: the fault goes in front of its reason, so the
       admin reads it before undraining, as with a node that drained for it.
    The heartbeat's UPDATE of the node holds its row, so the state read here stays true
    until the transaction ends.
    """
    state, reason, return_state = Node.objects.filter(pk=node.pk).values_list(
        "state", "state_reason", "return_state"
    )[0]
    if state in {NodeState.UP, NodeState.SUSPECT}:
        logger.warning("Draining node %s: %s", node.name, fault)
        # node_drain writes FAULT_REASON_PREFIX itself (no actor) and would cut the end.
        node_drain(node_id=node.pk, reason=_with_fault("", fault).removeprefix(FAULT_REASON_PREFIX))
        node_event_notify(event="node_drained", node=node.name, reason=fault)
        return
    if state == NodeState.DOWN and return_state:
        before = node_reason_on_return(state_reason=reason, return_state=return_state)
        to, new_reason = NodeState.DRAINED, _with_fault(before, fault)
    else:
        to, new_reason = return_state, _with_fault(reason, fault)
    if (to, new_reason) == (return_state, reason):
        return  # a fault still there (a lost GPU is in every heartbeat), recorded already
    logger.warning(
        "Hardware fault on node %s (%s), recorded in its reason: %s", node.name, state, fault
    )
    Node.objects.filter(pk=node.pk, state=state).update(return_state=to, state_reason=new_reason)


def agent_heartbeat_refused(
    *, node: Node, errors: Any, conflict: str = "", now: datetime | None = None
) -> None:
    """A heartbeat that was refused (400, 409, 415) still shows the node and its agent are up.

    Its readings are not stored, but its liveness is: a node must not go DOWN, and its
    running jobs be requeued, because its agent and the control plane disagree on a field
    (an agent older or newer than the server, a reading out of range) or on where a GPU
    belongs (a GPU registered on a node that is still draining: `_check_movable`).

    A GPU `conflict` (409) means the node's GPUs are not the ones registered for it, and
    the checks that would drain it for a missing GPU never ran (the refused heartbeat's
    transaction rolled back): it is drained with the conflict as its reason, so nothing
    new is placed on a GPU that may be gone until an admin has sorted the GPUs out.
    """
    logger.warning("Heartbeat of node %s refused: %s", node.name, errors)
    with transaction.atomic():
        _reconcile_on_commit(node, node_heartbeat_seen(node_id=node.pk, now=now))
        if conflict:
            state = node.state
            drained = node_drain(node_id=node.pk, reason=conflict)
            if drained.state != state and state in {NodeState.UP, NodeState.SUSPECT}:
                node_event_notify(event="node_drained", node=node.name, reason=conflict)


def _reconcile_on_commit(node: Node, needs_reconcile: bool) -> None:
    # Every heartbeat of a returning node asks; the request queues one reconcile at a
    # time per node (`node_return_reconcile_request`).
    if needs_reconcile and ssh_dispatch_enabled():
        from .tasks import node_return_reconcile_request

        transaction.on_commit(lambda: node_return_reconcile_request(node_id=node.pk))


def _job_samples(
    gpus: list[dict[str, Any]], devices: dict[str, Device], now: datetime
) -> list[JobGpuSample]:
    holders: dict[int, tuple[int, int]] = {}
    running: set[tuple[int, int]] = set()
    for device_id, job_id, attempt, state in Allocation.objects.filter(
        ended_at__isnull=True, device__in=devices.values()
    ).values_list("device_id", "job_id", "attempt", "job__state"):
        holders[device_id] = (job_id, attempt)
        if state == JobState.RUNNING:
            running.add((job_id, attempt))
    samples = []
    for gpu in gpus:
        if gpu["lost"]:
            continue
        device = devices[gpu["uuid"]]
        memory: dict[tuple[int, int], int] = defaultdict(int)
        for process in gpu["processes"]:
            if process.get("job_id") is not None:
                memory[(process["job_id"], process["attempt"])] += process["used_memory_mb"]
        holder = holders.get(device.pk)
        if holder is None:
            continue
        if holder not in memory and (gpu["processes"] or holder not in running):
            # Processes nobody could attribute (an agent without access to their /proc):
            # whose use it is is unknown, so nothing is recorded for the holder. Nor for
            # a job still STARTING (pulling its image) or stopping: not using its GPU then
            # is no sign of idleness.
            continue
        # Allocation is exclusive, so the device's utilization is the job's. A GPU its
        # holder does not use at all (no process on it: a notebook whose kernel never
        # touched CUDA, a job that crashed its GPU worker) is recorded too, as what it is,
        # or the job would never be judged idle (jobs.idle_services).
        samples.append(
            JobGpuSample(
                job_id=holder[0],
                attempt=holder[1],
                device=device,
                at=now,
                utilization_pct=gpu["utilization_pct"],
                memory_used_mb=min(memory[holder], PG_INT_MAX),  # many processes' sum
            )
        )
    return samples


def _record_progress(node: Node, readings: list[dict[str, Any]], now: datetime) -> int:
    """Fold progress readings into each attempt's JobProgress row; how many were taken.

    A reading counts only if it was taken through a GPU of this node that the attempt
    holds (`gpu_uuid`): an agent may not report for jobs elsewhere, and a process that
    claims another job's identity in its environment, on a GPU that job does not hold,
    cannot report for it. Of an attempt's readings, the one through its lowest device
    counts; from one node per attempt. It is tied to the attempt's device type when all
    its devices, on any node, are of one type. A count lower than the last one means the
    job restarted its counter within the attempt: the rate then starts again from there.
    """
    readings = [reading for reading in readings if reading.get("gpu_uuid")]
    if not readings:
        return 0
    held = {
        (job_id, attempt, uuid): device_id
        for job_id, attempt, uuid, device_id in Allocation.objects.filter(
            ended_at__isnull=True,
            device__node=node,
            job_id__in={reading["job_id"] for reading in readings},
        ).values_list("job_id", "attempt", "device__uuid", "device_id")
    }
    wanted: dict[tuple[int, int], tuple[int, float]] = {}  # attempt -> (device id, progress)
    for reading in readings:
        device_id = held.get((reading["job_id"], reading["attempt"], reading["gpu_uuid"]))
        key = (reading["job_id"], reading["attempt"])
        if device_id is not None and device_id < wanted.get(key, (device_id + 1, 0.0))[0]:
            wanted[key] = (device_id, reading["progress"])
    here = set(wanted)
    types: dict[tuple[int, int], set[int]] = defaultdict(set)
    # An attempt spread over nodes is measured from one of them only (the node of its
    # lowest device): its ranks may count differently, and readings alternating between
    # two counters would look like restarts.
    first_device: dict[tuple[int, int], tuple[int, int]] = {}
    for job_id, attempt, type_id, device_id, node_id in Allocation.objects.filter(
        ended_at__isnull=True, job_id__in={job for job, _ in here}
    ).values_list("job_id", "attempt", "device__device_type_id", "device_id", "device__node_id"):
        types[(job_id, attempt)].add(type_id)
        first_device[(job_id, attempt)] = min(
            first_device.get((job_id, attempt), (device_id, node_id)), (device_id, node_id)
        )
    taken = 0
    for key in sorted(here & wanted.keys()):
        if first_device[key][1] != node.pk:
            continue
        progress = wanted[key][1]
        type_ids = types[key]
        row = JobProgress.objects.select_for_update().filter(job_id=key[0], attempt=key[1]).first()
        if row is None:
            JobProgress.objects.create(
                job_id=key[0],
                attempt=key[1],
                device_type_id=next(iter(type_ids)) if len(type_ids) == 1 else None,
                first_progress=progress,
                first_at=now,
                last_progress=progress,
                last_at=now,
            )
        elif now <= row.last_at:
            continue  # a delayed or repeated heartbeat: nothing new
        elif progress < row.last_progress:
            # The counter restarted within the attempt: measure again from here.
            row.first_progress, row.first_at = progress, now
            row.last_progress, row.last_at = progress, now
            row.save(update_fields=["first_progress", "first_at", "last_progress", "last_at"])
        else:
            row.last_progress, row.last_at = progress, now
            row.save(update_fields=["last_progress", "last_at"])
        taken += 1
    return taken


def metrics_rollup(*, now: datetime | None = None) -> dict[str, int]:
    """Roll raw samples up into per-minute rows and apply the retention policy.

    1. Every complete minute since the last rolled one (at most 24 h back) is aggregated
       per device (and per job and device) and upserted, so a rerun is harmless.
    2. Raw samples older than 24 h, minute rows older than 30 days and jobs' progress
       readings older than the speed history (`PROGRESS_HISTORY`, 30 days) are deleted.
    Returns row counts.
    """
    now = now or timezone.now()
    this_minute = now.replace(second=0, microsecond=0)
    counts = {}
    for raw, minute_model, keys, fields in (
        (
            GpuSample,
            GpuMinute,
            ["device_id"],
            {
                "utilization_avg": Avg("utilization_pct"),
                "memory_used_max_mb": Max("memory_used_mb"),
                "temperature_max_c": Max("temperature_c"),
                "power_avg_w": Avg("power_w"),
            },
        ),
        (
            JobGpuSample,
            JobGpuMinute,
            ["job_id", "device_id"],
            {
                "utilization_avg": Avg("utilization_pct"),
                "memory_used_max_mb": Max("memory_used_mb"),
            },
        ),
    ):
        last = minute_model.objects.aggregate(last=Max("minute"))["last"]
        since = max(last, now - RAW_RETENTION) if last else now - RAW_RETENTION
        rows = (
            raw.objects.filter(at__gte=since, at__lt=this_minute)
            .annotate(minute=TruncMinute("at"))
            .values(*keys, "minute")
            .annotate(samples=Count("id"), **fields)
            .order_by()
        )
        objects = [minute_model(**row) for row in rows]
        minute_model.objects.bulk_create(
            objects,
            update_conflicts=True,
            unique_fields=[key.removesuffix("_id") for key in keys] + ["minute"],
            update_fields=["samples", *fields],
        )
        counts[minute_model.__name__] = len(objects)
        counts[f"{raw.__name__} deleted"] = raw.objects.filter(at__lt=now - RAW_RETENTION).delete()[
            0
        ]
        counts[f"{minute_model.__name__} deleted"] = minute_model.objects.filter(
            minute__lt=now - MINUTE_RETENTION
        ).delete()[0]
    # Progress older than what rounds read for speeds (agents.selectors) serves nothing.
    counts["JobProgress deleted"] = JobProgress.objects.filter(
        last_at__lt=now - PROGRESS_HISTORY
    ).delete()[0]
    return counts
