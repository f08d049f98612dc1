"""Writes for nodes, devices and device types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from accounts.models import AuditEntry, User
from accounts.services import audit_entries_write
from config.errors import Conflict, NotFound, ValidationFailed

from .choices import (
    DRAIN_STATES,
    DeviceKind,
    NodeState,
    Runtime,
    node_can_drain,
    node_can_undrain,
)
from .models import SPEED_MAX, SPEED_MIN, SPEED_RANGE_TEXT, Device, DeviceType, Node


@dataclass(frozen=True)
class DeviceSpec:
    index: int
    uuid: str
    device_type: str
    model_name: str = ""
    memory_mb: int = 0
    kind: DeviceKind = DeviceKind.GPU


def device_type_upsert(*, name: str, speed: float, display_name: str = "") -> DeviceType:
    """Create a device type, or update its speed and display name.

    Refuses (ValidationFailed naming `speed`) a speed outside [SPEED_MIN, SPEED_MAX]: a
    huge or subnormal speed overflows the normalized service and fails every round.
    """
    if not (isinstance(speed, int | float) and SPEED_MIN <= speed <= SPEED_MAX):
        raise ValidationFailed({"speed": [SPEED_RANGE_TEXT]})
    device_type, _ = DeviceType.objects.update_or_create(
        name=name, defaults={"speed": speed, "display_name": display_name or name.upper()}
    )
    return device_type


def node_register(
    *,
    name: str,
    address: str,
    devices: Sequence[DeviceSpec],
    ssh_port: int = 22,
    ssh_user: str = "gpulab",
    runtime: Runtime = Runtime.DOCKER,
    simulated: bool = False,
) -> Node:
    """Create or refresh a node and its devices (matched by UUID) in one transaction."""
    with transaction.atomic():
        node, _ = Node.objects.update_or_create(
            name=name,
            defaults={
                "address": address,
                "ssh_port": ssh_port,
                "ssh_user": ssh_user,
                "runtime": runtime,
                "simulated": simulated,
            },
        )
        for spec in devices:
            Device.all_objects.update_or_create(
                uuid=spec.uuid,
                defaults={
                    "retired_at": None,
                    "node": node,
                    "index": spec.index,
                    "kind": spec.kind,
                    "model_name": spec.model_name,
                    "device_type": DeviceType.objects.get(name=spec.device_type),
                    "memory_mb": spec.memory_mb,
                },
            )
    return node


# --------------------------------------------------------------------------- drain


def _audit(
    *,
    by: User | None,
    by_username: str,
    kind: AuditEntry.TargetKind,
    name: str,
    field: str,
    old: str,
    new: str,
) -> None:
    """One audit row for an admin's action on a node or device, in the caller's transaction."""
    audit_entries_write(
        actor=by,
        actor_username=by_username,
        target_kind=kind,
        target_name=name,
        changes={field: (old, new)},
    )


def _on_return_mark() -> str:
    # Imported here: agents depends on cluster at import time. The liveness services own
    # how a DOWN node's reason carries the one it returns with.
    from agents.services import ON_RETURN

    return ON_RETURN


def _reason_down(outage: str, on_return: str) -> str:
    from agents.services import node_reason_down  # as `_on_return_mark`

    return node_reason_down(outage, on_return)


def _outage_reason(node: Node) -> str:
    """The part of a DOWN node's reason that says why it is down, without the reason it
    comes back with (after the mark). With no mark, a node that returns drained has only
    that reason (e.g. a fault reported while it was down), so no outage part."""
    outage, mark, _ = node.state_reason.partition(_on_return_mark())
    if not mark and node.return_state in DRAIN_STATES:
        return ""
    return outage


def node_drain(*, node_id: int, reason: str, by: User | None = None, by_username: str = "") -> Node:
    """No new jobs on this node; running ones finish. DRAINED once nothing holds it.

    1. UP or SUSPECT → DRAINING, then DRAINED at once if nothing holds or is still
       stopping on it. The scheduler already places only on UP nodes, so this state
       change is the whole mechanism; `node_drain_settle` notices when the last job left.
    2. DOWN → stays DOWN, but comes back DRAINED instead of UP (Slurm's DOWN+DRAIN): an
       admin keeps a broken node out of service through its outage. Its jobs were all
       requeued when it went down, so there is nothing left to wait for.
    Anything else (already draining or drained) is left as it is. Each change writes one
    audit row with the actor and the reason.
    """
    username = by.username if by is not None else by_username
    who = f" by {username}" if username else ""
    text = f"Drained{who}: {reason}"[:255]
    with transaction.atomic():
        # Locked: the state read here is the one the audit row records as "old".
        node = Node.objects.select_for_update().get(pk=node_id)
        if not node_can_drain(node.state, node.return_state):
            return node
        if node.state == NodeState.DOWN:
            field, old, new = "return_state", node.return_state, NodeState.DRAINED
            outage = _outage_reason(node)
            node.return_state = NodeState.DRAINED
            # The outage's reason stays in front while it is down; the drain's is the one
            # it comes back with (`agents.services.node_reason_on_return`).
            node.state_reason = _reason_down(outage, text) if outage else text
            node.save(update_fields=["return_state", "state_reason"])
        else:
            field, old, new = "state", node.state, NodeState.DRAINING
            node.state = NodeState.DRAINING
            node.state_reason = text
            node.save(update_fields=["state", "state_reason"])
            # This node only: a heartbeat drains its node inside its own transaction,
            # holding that node's row, and touching other nodes there could deadlock with
            # a round that holds them (it locks every node it starts jobs on); the
            # periodic settle does the rest.
            if node_drain_settle(node_ids=[node_id]):
                new = NodeState.DRAINED
        _audit(
            by=by,
            by_username=by_username,
            kind=AuditEntry.TargetKind.NODE,
            name=node.name,
            field=field,
            old=old,
            new=f"{new}: {reason}",
        )
    return Node.objects.get(pk=node_id)


def node_drain_settle(*, node_ids: Sequence[int] | None = None) -> list[str]:
    """DRAINING → DRAINED for every node (of `node_ids`, if given) whose devices no live
    attempt holds and no ended attempt's process is still being stopped on.

    "Drained" tells the admin nothing runs there any more (e.g. to reboot it), so a
    cancelled job's process the node has not yet been seen to stop keeps it DRAINING,
    as Slurm waits for COMPLETING jobs (`devices_stopping`, bounded by its timeout).
    Returns the names of the nodes that became DRAINED.
    """
    # Imported here: jobs and scheduler depend on cluster, not the other way round at
    # import time.
    from jobs.choices import HOLDING_STATES
    from jobs.models import Allocation
    from scheduler.selectors import devices_stopping

    holding = Allocation.objects.filter(
        ended_at__isnull=True, job__state__in=HOLDING_STATES
    ).values("device__node_id")
    stopping = Device.all_objects.filter(pk__in=devices_stopping(now=timezone.now())).values(
        "node_id"
    )
    idle = (
        Node.objects.filter(state=NodeState.DRAINING)
        .exclude(pk__in=holding)
        .exclude(pk__in=stopping)
    )
    if node_ids is not None:
        idle = idle.filter(pk__in=node_ids)
    names = list(idle.values_list("name", flat=True))
    # The state filter repeats in the UPDATE, so an undrain in between wins.
    Node.objects.filter(name__in=names, state=NodeState.DRAINING).exclude(pk__in=holding).exclude(
        pk__in=stopping
    ).update(state=NodeState.DRAINED)
    return names


def node_undrain(*, node_id: int, by: User | None = None, by_username: str = "") -> Node:
    """DRAINING or DRAINED → UP: the node takes new jobs again.

    A DOWN node marked to come back drained is marked to come back UP instead, and its
    reason keeps only why it is down; it stays DOWN until its agent answers
    (`agents.services.node_return_reconcile`). One audit row per change.
    """
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node_id)
        if not node_can_undrain(node.state, node.return_state):
            return node
        if node.state == NodeState.DOWN:
            field, old = "return_state", node.return_state
            node.state_reason = _outage_reason(node)  # the drain's part goes
            node.return_state = NodeState.UP
            node.save(update_fields=["return_state", "state_reason"])
        else:
            field, old = "state", node.state
            node.state = NodeState.UP
            node.state_reason = ""
            node.save(update_fields=["state", "state_reason"])
        _audit(
            by=by,
            by_username=by_username,
            kind=AuditEntry.TargetKind.NODE,
            name=node.name,
            field=field,
            old=old,
            new=NodeState.UP,
        )
    return node


def _device_for_update(device_id: int, *, retired_too: bool = False) -> Device:
    """The device (in service, unless `retired_too`), locked: only its row (`of`), the
    node's is for its heartbeats."""
    devices = Device.all_objects if retired_too else Device.objects
    device = (
        devices.select_for_update(of=("self",)).select_related("node").filter(pk=device_id).first()
    )
    if device is None:
        raise NotFound(f"Device {device_id} does not exist.")
    return device


def _device_audit_name(device: Device) -> str:
    return f"{device.node.name}/{device.index} {device.uuid}"[:150]


def device_retire(*, device_id: int, now: datetime | None = None, by: User | None = None) -> Device:
    """The GPU was taken out of its node: never scheduled again, its history kept.

    Refused (Conflict) while a job still holds it. A GPU the agent reports again later
    comes back into service by itself (heartbeats register GPUs by UUID). A retirement
    writes one audit row; retiring a retired GPU changes nothing and writes none.
    """
    from jobs.models import Allocation  # jobs depends on cluster at import time

    with transaction.atomic():
        # Locked: the check and the retirement are one step for concurrent writers.
        device = _device_for_update(device_id, retired_too=True)
        if Allocation.objects.filter(device=device, ended_at__isnull=True).exists():
            raise Conflict(f"{device} is allocated to a job; retire it once the job has ended.")
        if device.retired_at is None:
            device.retired_at = now or timezone.now()
            device.save(update_fields=["retired_at"])
            _audit(
                by=by,
                by_username="",
                kind=AuditEntry.TargetKind.DEVICE,
                name=_device_audit_name(device),
                field="retired_at",
                old="",
                new=device.retired_at.isoformat(),
            )
    return device


# --------------------------------------------------------------------------- cordon


def device_cordon(*, device_id: int, reason: str, by: User | None = None) -> Device:
    """Take one GPU out of service: no new job starts on it; a job running there
    finishes (as a node drain does, for one device). For a sick GPU, where draining its
    node would idle the healthy ones too: cordon it, then undrain the node, whose faults
    from this GPU then no longer drain it (`agents.heartbeats`).

    Cordoning a cordoned GPU changes nothing and writes no audit row; a new cordon
    writes one, with the reason.
    """
    reason = " ".join(reason.split())
    if not reason:
        raise ValidationFailed({"reason": ["Say why the GPU is cordoned (e.g. Xid 79)."]})
    return _cordon_set(device_id=device_id, reason=reason, by=by)


def device_uncordon(*, device_id: int, by: User | None = None) -> Device:
    """Put a cordoned GPU back into service (the next round may start jobs on it)."""
    return _cordon_set(device_id=device_id, reason=None, by=by)


def _cordon_set(*, device_id: int, reason: str | None, by: User | None) -> Device:
    """Cordon the device with `reason`, or uncordon it (None); one audit row per change."""
    with transaction.atomic():
        device = _device_for_update(device_id)
        if (device.cordoned_at is not None) == (reason is not None):
            return device  # as asked already
        if reason is None:
            device.cordoned_at, device.cordon_reason = None, ""
        else:
            who = f" by {by.username}" if by is not None else ""
            device.cordoned_at = timezone.now()
            device.cordon_reason = f"Cordoned{who}: {reason}"[:255]
        device.save(update_fields=["cordoned_at", "cordon_reason"])
        _audit(
            by=by,
            by_username="",
            kind=AuditEntry.TargetKind.DEVICE,
            name=_device_audit_name(device),
            field="cordoned",
            old="yes" if reason is None else "no",
            new="no" if reason is None else f"yes: {reason}",
        )
    return device
