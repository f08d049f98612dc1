"""Reads about nodes, devices and device types."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from django.db.models import QuerySet

from .choices import DeviceKind
from .models import Device, DeviceType, Node


def device_type_names() -> set[str]:
    return set(DeviceType.objects.values_list("name", flat=True))


def max_gpus_grantable(*, accepted_types: Iterable[str], single_node: bool) -> int:
    """The most GPUs this cluster could ever give one job.

    Counts every GPU of an accepted type (all types when none is named) on every node,
    whatever its state today: a drained node may come back, so it still counts. With
    `single_node` only the largest node's share counts (consolidation `required`).
    """
    devices = Device.objects.filter(kind=DeviceKind.GPU)
    accepted = list(accepted_types)
    if accepted:
        devices = devices.filter(device_type__name__in=accepted)
    per_node = Counter(devices.values_list("node_id", flat=True))
    if not per_node:
        return 0
    return max(per_node.values()) if single_node else sum(per_node.values())


def node_list() -> QuerySet[Node]:
    return Node.objects.prefetch_related("devices__device_type")
