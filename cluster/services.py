"""Writes for nodes, devices and device types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from .choices import DeviceKind, Runtime
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
            Device.objects.update_or_create(
                uuid=spec.uuid,
                defaults={
                    "node": node,
                    "index": spec.index,
                    "kind": spec.kind,
                    "model_name": spec.model_name,
                    "device_type": DeviceType.objects.get(name=spec.device_type),
                    "memory_mb": spec.memory_mb,
                },
            )
    return node
