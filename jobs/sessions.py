"""Interactive sessions: a Jupyter server, a shell or an IDE's server on GPUs, for hours.

What Open OnDemand, Determined's notebooks and Run:ai's interactive workloads give a lab,
within gpulab's one job model: a session is a job with `interactive = True` that
1. is not preempted by LAS, moved or evicted (`scheduler.snapshot` marks it
   non-preemptible but reclaimable): a notebook's state lives in memory and a preemption
   would lose it. Only a group taking back its guarantee may stop one that runs beyond
   its own group's guarantee (scheduler/policies/guarantees.py), as Run:ai keeps
   interactive workloads non-preemptible within their project's quota;
2. must end: its walltime is at most `GPULAB_SESSION_MAX_HOURS` (12), and
   `GPULAB_SESSION_DEFAULT_HOURS` (4) when it asks for none; it is never retried and is
   not an array; its GPUs are on one node;
3. is judged for idleness on its own window (`SchedulerConfig.session_idle_minutes`,
   jobs.idle_services), also when idle reaping of batch jobs is off;
4. gets, at each start, a TCP port on its node from `GPULAB_SESSION_PORTS` and, once, a
   secret token, both in its environment (`agents.runtimes.session_environment`:
   `GPULAB_SESSION_PORT`/`_TOKEN`, and `JUPYTER_PORT`/`JUPYTER_TOKEN`, which Jupyter
   Server reads, so `jupyter lab --ip=0.0.0.0 --no-browser` needs no shell). A Docker
   session's port is published on the node. The job page, the API and `gpulab show`
   give its owner the address to open; only the owner sees the token.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from cluster.models import Device
from config.errors import IllegalTransition
from scheduler.selectors import STOP_CONFIRM_TIMEOUT_SECONDS

from . import validation
from .choices import Consolidation
from .models import Job


def session_rules(spec: object, check: Callable[[str, list[str]], None]) -> tuple[str, int]:
    """A session's consolidation (one node) and walltime (the default when none, at most
    the maximum); reports, through `check`, the fields a session may not have."""
    most = settings.GPULAB_SESSION_MAX_HOURS * 3600
    walltime = getattr(spec, "walltime_seconds", None)
    if walltime is None:
        walltime = settings.GPULAB_SESSION_DEFAULT_HOURS * 3600
    elif (
        not validation.integer_errors(walltime, minimum=60, maximum=validation.MAX_WALLTIME_SECONDS)
        and walltime > most
    ):
        check(
            "walltime_seconds",
            [
                f"A session runs at most {settings.GPULAB_SESSION_MAX_HOURS} h "
                f"({most} s): the scheduler does not preempt it, so it must end."
            ],
        )
    if getattr(spec, "max_retries", 0) not in (0, None):
        check("max_retries", ["A session is not retried: leave it at 0."])
    if getattr(spec, "array_size", None) is not None:
        check("array_size", ["A session cannot be an array."])
    return Consolidation.REQUIRED.value, walltime


def session_token_new() -> str:
    """A secret to reach the session with (Jupyter's token): 256 random bits."""
    return secrets.token_urlsafe(32)


def session_port_assign(*, device_ids: Sequence[int]) -> int:
    """The lowest port of `GPULAB_SESSION_PORTS` no other session may still be listening
    on: on the node of `device_ids`, or anywhere with a gateway (its tunnels all end on
    the user's localhost, so two sessions on two nodes must differ too). Call inside the
    start's transaction (rounds are serialized by their lock, so two starts never race).

    A session still listening is one with an allocation not yet released: holding GPUs,
    or ended (cancelled, timed out) while the node poll has not yet stopped its process,
    as `scheduler.selectors.devices_stopping` counts it.
    """
    stopping_since = timezone.now() - timedelta(seconds=STOP_CONFIRM_TIMEOUT_SECONDS)
    # One Q, so every condition is about the same allocation row.
    listening = Q(allocations__released_at__isnull=True) & (
        Q(allocations__ended_at__isnull=True)
        | Q(
            allocations__ended_at__gte=stopping_since,
            allocations__device__node__simulated=False,  # demo nodes stop at once
        )
    )
    if not settings.GPULAB_SESSION_GATEWAY:
        node_id = Device.objects.filter(pk__in=device_ids).values_list("node_id", flat=True).first()
        listening &= Q(allocations__device__node_id=node_id)
    sessions = Job.objects.filter(listening, interactive=True, session_port__isnull=False)
    used = set(sessions.values_list("session_port", flat=True))
    first, last = settings.GPULAB_SESSION_PORTS
    for port in range(first, last + 1):
        if port not in used:
            return port
    # The start is dropped (the round's apply step logs it); the job waits for a port.
    raise IllegalTransition(f"Every session port ({first}-{last}) of the node is taken.")
