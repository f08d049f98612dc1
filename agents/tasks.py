"""Celery tasks of the agents: thin, primitive arguments in, one service call each.

They own only the retry policy: network trouble (NodeUnreachable) is retried with
backoff; a refused host key is not (an admin must act), and the launch or the stop then
gives up, taking the node down.
gpulab's own SSH setup failing (SshMisconfigured: no key, or an unreadable one) is no
node's fault: it is logged as an error and nothing is charged to the node or its jobs;
the launches and stops are asked for again by `agent_poll_all_task` once it is fixed.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from cluster.services import node_drain_settle
from config.fail_open_cache import cache_add, cache_delete, cache_set
from scheduler.models import MAX_PREEMPTION_GRACE_SECONDS
from scheduler.selectors import scheduler_config_get

from .heartbeats import metrics_rollup
from .selectors import attempts_overdue, attempts_to_archive, nodes_to_poll, nodes_to_prune
from .services import (
    ARCHIVE_TIME_LIMIT_SECONDS,
    PRUNE_TIME_LIMIT_SECONDS,
    SSH_MARGIN_SECONDS,
    agent_launch,
    agent_launch_gave_up,
    agent_node_logs_archive,
    agent_node_poll,
    agent_node_prune,
    agent_stop,
    agent_stop_gave_up,
    launch_time_limit_seconds,
    node_liveness_sweep,
    node_return_reconcile,
    undelivered_launches_request,
)
from .simulated import simulated_heartbeats
from .ssh import CommandTimedOut, HostKeyRefused, NodeUnreachable, SshMisconfigured
from .webhooks import WebhookRefused, webhook_about, webhook_post, webhook_url_get

logger = logging.getLogger(__name__)

SSH_RETRIES = 3
# Stopping stale attempts waits one grace period (all are stopped together), which an
# admin may set up to MAX_PREEMPTION_GRACE_SECONDS; the poll's status checks and the
# listing are ordinary SSH commands, covered by the margin.
STOPPING_TIME_LIMIT = MAX_PREEMPTION_GRACE_SECONDS + SSH_MARGIN_SECONDS


def _misconfigured(exc: SshMisconfigured, what: str) -> None:
    logger.error("SSH is misconfigured on this worker, so %s did not run: %s", what, exc.message)


# Above GPULAB_LAUNCH_TIMEOUT_SECONDS (600 by default: an image pull may be slow), with
# room for connecting and writing the run directory.
@shared_task(
    bind=True,
    name="agents.launch",
    max_retries=SSH_RETRIES,
    time_limit=launch_time_limit_seconds(),
)
def agent_launch_task(self, job_id: int, attempt: int) -> None:  # type: ignore[no-untyped-def]
    try:
        agent_launch(job_id=job_id, attempt=attempt)
    except NodeUnreachable as exc:
        if self.request.retries < SSH_RETRIES:
            raise self.retry(countdown=5 * 2**self.request.retries) from exc
        agent_launch_gave_up(job_id=job_id, attempt=attempt, error=exc)
    except HostKeyRefused as exc:
        agent_launch_gave_up(job_id=job_id, attempt=attempt, error=exc)
    except SshMisconfigured as exc:
        # The job stays STARTING; the overdue sweep asks for its launch again.
        _misconfigured(exc, f"the launch of job {job_id} attempt {attempt}")


# Long enough for the longest preemption grace an admin can set, plus SSH time.
@shared_task(bind=True, name="agents.stop", max_retries=SSH_RETRIES, time_limit=STOPPING_TIME_LIMIT)
def agent_stop_task(self, job_id: int, attempt: int, grace_seconds: int) -> None:  # type: ignore[no-untyped-def]
    try:
        agent_stop(job_id=job_id, attempt=attempt, grace_seconds=grace_seconds)
    except SshMisconfigured as exc:
        # The job stays PREEMPTING; the overdue sweep asks for its stop again.
        _misconfigured(exc, f"the stop of job {job_id} attempt {attempt}")
    except NodeUnreachable as exc:
        # Retrying covers a blip. A node whose agent still sends heartbeats is never
        # taken down by the liveness sweep, so giving up must take it down here, or the
        # job would hold its GPUs as PREEMPTING for ever.
        if self.request.retries < SSH_RETRIES:
            raise self.retry(countdown=5 * 2**self.request.retries) from exc
        agent_stop_gave_up(job_id=job_id, attempt=attempt, error=exc)
    except HostKeyRefused as exc:
        agent_stop_gave_up(job_id=job_id, attempt=attempt, error=exc)


def node_poll_time_limit(grace_seconds: int) -> int:
    """How long one node poll may run: one grace period (stale attempts are stopped
    together) plus the SSH margin for connecting, the status checks and the listing."""
    return grace_seconds + SSH_MARGIN_SECONDS


# The decorator's limit is for a poll sent without its own (one queued before an upgrade);
# `agent_poll_all_task` gives each poll `node_poll_time_limit` of the grace it passes.
@shared_task(name="agents.node_poll", time_limit=STOPPING_TIME_LIMIT)
def agent_node_poll_task(node_id: int, grace_seconds: int | None = None) -> dict[str, int] | None:
    # One poll of a node at a time: a poll stopping a stale attempt waits a grace period,
    # and the polls queued every 10 s meanwhile would each stop it again, filling the SSH
    # worker's slots. A poll finding another under way leaves the node to it.
    #
    # The guard lasts as long as this poll may run (its grace, not the longest an admin
    # could set): a worker killed mid-poll (OOM, restart) leaves it behind, and nobody
    # polls the node until it expires. `agent_poll_all_task` sends each poll with that
    # same time limit, so no poll outlives its guard.
    grace = (
        scheduler_config_get().preemption_grace_seconds if grace_seconds is None else grace_seconds
    )
    key = f"agents:node-poll:{node_id}"
    if not cache_add(key, timeout=node_poll_time_limit(grace)):
        return None
    try:
        return agent_node_poll(node_id=node_id, grace_seconds=grace)
    except SshMisconfigured as exc:
        _misconfigured(exc, f"the poll of node {node_id}")
        return None
    finally:
        cache_delete(key)


def _resend_due(kind: str, job_id: int, attempt: int, every: timedelta) -> bool:
    """Whether to ask again for an attempt's overdue launch or stop: at most once per
    `every`. Nothing in the database moves when a task is re-sent, so an overdue attempt
    stayed overdue and got a copy on every 10 s poll, racing the re-sent launch's image
    pull on the node."""
    return cache_add(f"agents:resent:{kind}:{job_id}:{attempt}", timeout=every.total_seconds())


# The poll is asked for every POLL_INTERVAL_SECONDS (config/celery_app.py). One that no
# worker took within a few intervals is dropped: a newer one is queued behind it, so a
# busy SSH queue holds at most a few polls per node instead of an ever longer backlog.
POLL_INTERVAL_SECONDS = 10
NODE_POLL_EXPIRES_SECONDS = 3 * POLL_INTERVAL_SECONDS


@shared_task(name="agents.poll_all", time_limit=30)
def agent_poll_all_task() -> int:
    """Fan out one poll per real node, so one slow node delays no other; and ask again
    for launches a round could not send, and for launches and stops whose task was lost
    (both are idempotent)."""
    node_ids = nodes_to_poll()
    grace = scheduler_config_get().preemption_grace_seconds
    for node_id in node_ids:
        # The grace travels with the poll, and bounds it: a poll's guard lasts exactly
        # as long as the worker lets it run.
        agent_node_poll_task.apply_async(
            kwargs={"node_id": node_id, "grace_seconds": grace},
            expires=NODE_POLL_EXPIRES_SECONDS,
            time_limit=node_poll_time_limit(grace),
        )
    launch_after = timedelta(seconds=2 * settings.GPULAB_LAUNCH_TIMEOUT_SECONDS)
    stop_after = timedelta(seconds=grace + 2 * settings.GPULAB_SSH_TIMEOUT_SECONDS + 60)
    for job_id, attempt in undelivered_launches_request():
        # Sent a moment ago: the overdue sweep leaves it alone for as long as any launch.
        _resend_due("launch", job_id, attempt, launch_after)
    overdue = attempts_overdue(now=timezone.now(), launch_after=launch_after, stop_after=stop_after)
    for job_id, attempt in overdue.launches:
        if _resend_due("launch", job_id, attempt, launch_after):
            agent_launch_task.delay(job_id=job_id, attempt=attempt)
    for job_id, attempt in overdue.stops:
        if _resend_due("stop", job_id, attempt, stop_after):
            agent_stop_task.delay(job_id=job_id, attempt=attempt, grace_seconds=grace)
    return len(node_ids)


@shared_task(name="agents.node_prune", time_limit=PRUNE_TIME_LIMIT_SECONDS)
def agent_node_prune_task(node_id: int) -> int:
    try:
        return len(agent_node_prune(node_id=node_id))
    except SshMisconfigured as exc:
        _misconfigured(exc, f"the clean-up of node {node_id}")
    except CommandTimedOut as exc:
        # Every hour the same: the node's disk fills meanwhile. Someone should look.
        logger.warning("Clean-up of node %s did not finish: %s", node_id, exc)
    except (NodeUnreachable, HostKeyRefused) as exc:
        # Nothing is lost by waiting: the next hourly run removes them.
        logger.info("Clean-up of node %s skipped: %s", node_id, exc)
    return 0


@shared_task(name="agents.prune_all", time_limit=30)
def agent_prune_all_task() -> int:
    """Fan out one clean-up of finished attempts per real node that is up."""
    node_ids = nodes_to_prune()
    for node_id in node_ids:
        agent_node_prune_task.apply_async(kwargs={"node_id": node_id}, expires=3600)
    return len(node_ids)


@shared_task(name="agents.node_logs_archive", time_limit=ARCHIVE_TIME_LIMIT_SECONDS)
def agent_node_logs_archive_task(node_id: int, attempts: list[list[int]]) -> int:
    # One copy per node at a time: a slow node's copy outlasting the minute would have
    # the next one copy the same logs alongside it.
    key = f"agents:node-logs-archive:{node_id}"
    if not cache_add(key, timeout=ARCHIVE_TIME_LIMIT_SECONDS):
        return 0
    try:
        return agent_node_logs_archive(node_id=node_id, attempts=attempts)
    except SshMisconfigured as exc:
        _misconfigured(exc, f"copying logs from node {node_id}")
    except (NodeUnreachable, HostKeyRefused, CommandTimedOut) as exc:
        # Nothing is lost by waiting: the logs stay on the node, and the next run (or the
        # clean-up, before it removes them) copies them.
        logger.info("Logs of node %s not copied now: %s", node_id, exc)
    finally:
        cache_delete(key)
    return 0


@shared_task(name="agents.logs_archive_all", time_limit=30)
def agent_logs_archive_all_task() -> int:
    """Fan out one copy of ended attempts' logs per node that has some to copy."""
    by_node = attempts_to_archive()
    for node_id, attempts in by_node.items():
        agent_node_logs_archive_task.apply_async(
            kwargs={"node_id": node_id, "attempts": [list(pair) for pair in attempts]},
            expires=60,
        )
    return len(by_node)


@shared_task(name="agents.liveness_sweep", time_limit=60)
def node_liveness_sweep_task() -> dict[str, list[str]]:
    return node_liveness_sweep()


@shared_task(name="agents.drain_settle", time_limit=30)
def node_drain_settle_task() -> list[str]:
    return node_drain_settle()


# A retried return reconcile waits this long first (a blip on the node's network).
RETURN_RETRY_SECONDS = 10


def _return_guard(node_id: int) -> str:
    return f"agents:node-return:{node_id}"


def node_return_reconcile_request(*, node_id: int) -> bool:
    """Queue the return reconcile of a DOWN node that sent a heartbeat, unless one is
    queued or under way already; True when queued.

    The agent keeps sending heartbeats (every 10 s) while the reconcile runs, and each
    asks for it again: without the guard each copy would hold an SSH worker slot for its
    connect budget or a grace period, and send the stale attempts SIGTERM again. The
    guard is set here, when queued, not when a worker takes the task, because the copies
    would fill the queue all the same; the task clears it when it ends. It lasts the
    task's time limit, so a task lost on the way (a worker killed mid-run, a broker
    restart) holds the node DOWN for at most that long before a heartbeat asks again.
    """
    key = _return_guard(node_id)
    if not cache_add(key, timeout=STOPPING_TIME_LIMIT):
        return False
    try:
        node_return_reconcile_task.delay(node_id=node_id)
    except Exception:
        cache_delete(key)  # never queued: the next heartbeat must be able to ask again
        raise
    return True


@shared_task(
    name="agents.node_return_reconcile",
    max_retries=SSH_RETRIES,
    bind=True,
    time_limit=STOPPING_TIME_LIMIT,
)
def node_return_reconcile_task(self, node_id: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """A DOWN node sent a heartbeat: stop its stale attempts, then it is UP again.

    Queued through `node_return_reconcile_request`, whose guard it clears when it ends,
    and keeps (renewed for the next try) while a retry is on its way.
    """
    key = _return_guard(node_id)
    retrying = False
    try:
        grace = scheduler_config_get().preemption_grace_seconds
        try:
            stopped = node_return_reconcile(node_id=node_id, grace_seconds=grace)
        except SshMisconfigured as exc:
            # The node stays DOWN; its next heartbeat asks for the reconcile again.
            _misconfigured(exc, f"the return of node {node_id}")
            return []
        except NodeUnreachable as exc:
            if self.request.retries < self.max_retries:
                retrying = True
                cache_set(key, 1, timeout=STOPPING_TIME_LIMIT + RETURN_RETRY_SECONDS)
            raise self.retry(countdown=RETURN_RETRY_SECONDS) from exc
        return [list(pair) for pair in stopped]
    finally:
        if not retrying:
            cache_delete(key)


@shared_task(name="agents.metrics_rollup", time_limit=300)
def metrics_rollup_task() -> dict[str, int]:
    return metrics_rollup()


@shared_task(name="agents.simulated_heartbeats", time_limit=60)
def simulated_heartbeats_task() -> int:
    return simulated_heartbeats()


@shared_task(bind=True, name="agents.webhook_post", max_retries=3, time_limit=30)
def webhook_post_task(self, payload: dict, group_id: int | None = None) -> bool:  # type: ignore[no-untyped-def]
    """Post an event to the admins' webhook, or to group `group_id`'s (jobs.webhooks);
    retried a minute apart, then dropped. False when dropped, or when there is no webhook
    to post to any more: the URL is read at each try, so one cleared meanwhile gets nothing."""
    url = webhook_url_get(group_id=group_id)
    if not url:
        return False
    try:
        webhook_post(payload, url=url)
    except WebhookRefused as exc:
        if self.request.retries >= self.max_retries:
            logger.warning("Webhook about %s dropped: %s", webhook_about(payload), exc)
            return False
        raise self.retry(countdown=60, exc=exc) from None
    return True
