"""Writes for nodes, devices and device types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from config.errors import Conflict, NotFound

from .choices import DeviceKind, NodeState, Runtime
from .models import Device, DeviceType, Node


@dataclass(frozen=True)
class DeviceSpec:
    index: int
    uuid: str
    device_type: str
    model_name: str = ""
    memory_mb: int = 0
    kind: DeviceKind = DeviceKind.GPU


def device_type_upsert(*, name: str, speed: float, display_name: str = "") -> DeviceType:
    """Create a device type, or update its speed and display name."""
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


def node_drain(*, node_id: int, reason: str, by_username: str = "") -> Node:
    """No new jobs on this node; running ones finish. DRAINED once nothing holds it.

    The scheduler already places only on UP nodes, so this state change is the whole
    mechanism; `node_drain_settle` notices when the last job has left.
    """
    who = f" by {by_username}" if by_username else ""
    Node.objects.filter(pk=node_id, state__in=[NodeState.UP, NodeState.SUSPECT]).update(
        state=NodeState.DRAINING, state_reason=f"Drained{who}: {reason}"[:255]
    )
    # This node only: a heartbeat drains its node inside its own transaction, holding that
    # node's row, and touching other nodes there could deadlock with a round that holds
    # them (it locks every node it starts jobs on); the periodic settle does the rest.
    node_drain_settle(node_ids=[node_id])
    return Node.objects.get(pk=node_id)


def node_drain_settle(*, node_ids: Sequence[int] | None = None) -> list[str]:
    """DRAINING → DRAINED for every node (of `node_ids`, if given) whose devices no live
    attempt holds any more.

    Returns the names of the nodes that became DRAINED.
    """
    # Imported here: jobs depends on cluster, not the other way round at import time.
    from jobs.choices import HOLDING_STATES
    from jobs.models import Allocation

    busy = Allocation.objects.filter(ended_at__isnull=True, job__state__in=HOLDING_STATES).values(
        "device__node_id"
    )
    idle = Node.objects.filter(state=NodeState.DRAINING).exclude(pk__in=busy)
    if node_ids is not None:
        idle = idle.filter(pk__in=node_ids)
    names = list(idle.values_list("name", flat=True))
    # The state filter repeats in the UPDATE, so an undrain in between wins.
    Node.objects.filter(name__in=names, state=NodeState.DRAINING).exclude(pk__in=busy).update(
        state=NodeState.DRAINED
    )
    return names


def node_undrain(*, node_id: int) -> Node:
    """DRAINING or DRAINED → UP: the node takes new jobs again."""
    Node.objects.filter(pk=node_id, state__in=[NodeState.DRAINING, NodeState.DRAINED]).update(
        state=NodeState.UP, state_reason=""
    )
    return Node.objects.get(pk=node_id)


def device_retire(*, device_id: int, now: datetime | None = None) -> Device:
    """The GPU was taken out of its node: never scheduled again, its history kept.

    Refused (Conflict) while a job still holds it. A GPU the agent reports again later
    comes back into service by itself (heartbeats register GPUs by UUID).
    """
    from jobs.models import Allocation  # jobs depends on cluster at import time

    with transaction.atomic():
        # Locked: the check and the retirement are one step for concurrent writers.
        device = Device.all_objects.select_for_update().filter(pk=device_id).first()
        if device is None:
            raise NotFound(f"Device {device_id} does not exist.")
        if Allocation.objects.filter(device=device, ended_at__isnull=True).exists():
            raise Conflict(f"{device} is allocated to a job; retire it once the job has ended.")
        if device.retired_at is None:
            device.retired_at = now or timezone.now()
            device.save(update_fields=["retired_at"])
    return device
