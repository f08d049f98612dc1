"""Reads about nodes, devices and device types."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from django.db.models import QuerySet

from .choices import DeviceKind
from .models import Device, DeviceType, Node


def device_type_names() -> set[str]:
    return set(DeviceType.objects.values_list("name", flat=True))


def jobs_may_span_nodes() -> bool:
    """Whether one job may hold GPUs on several nodes.

    Only on a fully simulated (demo) cluster: the SSH launcher starts a job as one process
    tree on one node (`agents.services.agent_launch`), with no per-node launch or
    rendezvous for a multi-node job yet. On a cluster with real nodes every job is placed
    as `required` (one node), whatever consolidation it asked for.
    """
    return not Node.objects.filter(simulated=False).exists()


def max_gpus_grantable(*, accepted_types: Iterable[str], single_node: bool) -> int:
    """The most GPUs this cluster could ever give one job.

    A job never spans device types, so this is the largest count of one accepted type
    (any type when none is named), on every node whatever its state today: a drained node
    may come back, so it still counts. With `single_node` only one node's share counts
    (consolidation `required`, or any job on a cluster with real nodes).
    """
    devices = Device.objects.filter(kind=DeviceKind.GPU)
    accepted = list(accepted_types)
    if accepted:
        devices = devices.filter(device_type__name__in=accepted)
    per_pool = Counter(
        devices.values_list("device_type_id", *(("node_id",) if single_node else ()))
    )
    return max(per_pool.values(), default=0)


def node_list() -> QuerySet[Node]:
    return Node.objects.prefetch_related("devices__device_type")
