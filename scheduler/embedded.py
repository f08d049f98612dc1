"""The demo's scheduler loop: the same round service on a timer, in a thread of the web
process, so `make demo` needs neither Redis nor a Celery worker.

There is no second decision path here: each iteration calls `scheduling_round_run` and
the simulated agents' tick, exactly what the Celery tasks call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

logger = logging.getLogger(__name__)

_wake = threading.Event()
_started = threading.Lock()
_thread: threading.Thread | None = None
# The simulated agents need to notice finished jobs promptly, even between rounds.
TICK_SECONDS = 2.0
# What Celery beat does every 60 s (metrics roll-up, dashboard aggregates), a little more
# often here so a newcomer's charts fill within the first minutes of the demo.
AGGREGATES_SECONDS = 30.0


def wake() -> None:
    """Ask the loop for a round now (submit, cancel, finish)."""
    _wake.set()


def start() -> threading.Thread:
    """Start the loop once per process; later calls return the running thread."""
    global _thread
    with _started:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run_forever, name="gpulab-scheduler", daemon=True)
            _thread.start()
    return _thread


def _run_forever() -> None:
    import time

    # No round yet: the first pass runs one at once.
    last_round = float("-inf")
    next_aggregates = 0.0
    while True:
        event = _wake.wait(timeout=TICK_SECONDS)
        _wake.clear()
        try:
            last_round, next_aggregates = iterate(
                event=event,
                now=time.monotonic(),
                last_round=last_round,
                next_aggregates=next_aggregates,
            )
        except Exception:  # the loop must survive a bad round; the next one retries
            logger.exception("Embedded scheduling loop iteration failed")
        finally:
            close_old_connections()


def iterate(
    *, event: bool, now: float, last_round: float, next_aggregates: float
) -> tuple[float, float]:
    """One pass of the loop: what Celery beat's tasks do (agents' tick and heartbeats,
    drain settling, a round when asked or due, the aggregates when due). Returns when the
    last round ran and when the aggregates are due next.

    A timer round is due one round interval after the last round, with the interval read
    afresh on every pass: an admin who shortens it from an hour to 10 s gets the next round
    within 10 s of the last one, not an hour after it.
    """
    from agents.heartbeats import metrics_rollup
    from agents.simulated import simulated_heartbeats, simulated_tick
    from cluster.services import node_drain_settle
    from dashboard.services import aggregates_update
    from dashboard.warm import figure_caches_warm
    from jobs.idle_services import jobs_idle_sweep

    from .choices import RoundTrigger
    from .forecast_services import start_forecasts_refresh
    from .selectors import scheduler_config_get
    from .services import scheduling_round_run

    config = scheduler_config_get()
    # Beat runs each of these as a task of its own: one that keeps raising must stop
    # neither the rounds nor the others, nor the clocks this returns.
    changes = _guarded(
        simulated_tick, "the next tick", grace_seconds=config.preemption_grace_seconds
    )
    _guarded(simulated_heartbeats, "the next tick")  # GPU metrics for the demo, every 10 s
    _guarded(node_drain_settle, "the next tick")  # a drained node whose last job left
    if event or changes or now >= last_round + config.round_interval_seconds:
        trigger = RoundTrigger.EVENT if event or changes else RoundTrigger.TIMER
        try:
            scheduling_round_run(trigger=trigger)
        except Exception:
            # Recorded and logged with its traceback as a failed round already; like
            # beat's timer, wait an interval before the next try instead of one every
            # tick, and keep the pages fed.
            logger.warning("The next scheduling round comes after one interval.")
        last_round = now
    if now >= next_aggregates:
        next_aggregates = now + AGGREGATES_SECONDS
        later = "the aggregates"
        _guarded(metrics_rollup, later)
        _guarded(aggregates_update, later)
        _guarded(figure_caches_warm, later)
        _guarded(start_forecasts_refresh, later, now=timezone.now())
        _guarded(jobs_idle_sweep, later, now=timezone.now())
    return last_round, next_aggregates


def _guarded(sweep: Callable[..., Any], runs_again_with: str, **kwargs: Any) -> Any:
    """`sweep(**kwargs)`, or None (logged with its traceback) when it raises."""
    try:
        return sweep(**kwargs)
    except Exception:
        logger.exception("%s failed; it runs again with %s.", sweep.__name__, runs_again_with)
        return None
