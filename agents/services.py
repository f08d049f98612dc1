"""What the control plane asks of node agents: start a job attempt, stop one.

Called after the scheduling round's transaction commits. Jobs on simulated nodes (the
demo) are handled in-process by `agents.simulated`. Launching on real nodes over SSH is
the node-agents issue (#5); until it lands such a job stays STARTING and this logs why.
"""

from __future__ import annotations

import logging

from cluster.models import Node
from jobs.models import Allocation

from . import simulated

logger = logging.getLogger(__name__)


def _node_of(job_id: int, attempt: int) -> Node | None:
    allocation = (
        Allocation.objects.filter(job_id=job_id, attempt=attempt)
        .select_related("device__node")
        .first()
    )
    return allocation.device.node if allocation else None


def agent_launch_request(*, job_id: int, attempt: int) -> None:
    node = _node_of(job_id, attempt)
    if node is None:
        return
    if node.simulated:
        simulated.simulated_launch(job_id=job_id)
        return
    logger.warning(
        "Job %s attempt %s is placed on real node %s, but SSH launching is not implemented yet.",
        job_id, attempt, node.name,
    )  # fmt: skip


def agent_stop_request(*, job_id: int, attempt: int, grace_seconds: int) -> None:
    node = _node_of(job_id, attempt)
    if node is None or node.simulated:
        return  # the simulated agent requeues after the grace period on its next tick
    logger.warning(
        "Job %s attempt %s should stop on real node %s, but SSH stopping is not implemented yet.",
        job_id, attempt, node.name,
    )  # fmt: skip
