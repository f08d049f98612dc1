"""Celery tasks of the scheduler: thin, primitive arguments in, one service call each."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from agents.simulated import simulated_tick

from .choices import RoundOutcome, RoundTrigger
from .forecast_services import start_forecasts_refresh
from .selectors import round_is_due, scheduler_config_get
from .services import scheduling_round_run, scheduling_rounds_prune
from .triggers import round_request_clear

# A round is idempotent (it re-reads everything), so it is acknowledged late: a worker
# killed mid-round leaves the message to be redelivered, and the next round finishes the
# work. The time limits stay far below the broker's visibility timeout (settings).
ROUND_TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": 90,
    "time_limit": 120,
}


@shared_task(bind=True, name="scheduler.round", max_retries=5, **ROUND_TASK_OPTIONS)
def scheduling_round_task(self, trigger: str = RoundTrigger.TIMER) -> dict[str, object]:  # type: ignore[no-untyped-def]
    if trigger == RoundTrigger.TIMER and not round_is_due():
        return {"round": None, "outcome": "not due"}
    if trigger == RoundTrigger.EVENT:
        round_request_clear()
    scheduling_round = scheduling_round_run(trigger=RoundTrigger(trigger))
    if scheduling_round.outcome == RoundOutcome.LOCKED and trigger == RoundTrigger.EVENT:
        # The round in progress may have read its snapshot before this event: run again.
        raise self.retry(countdown=1)
    return {"round": scheduling_round.pk, "outcome": scheduling_round.outcome}


@shared_task(name="agents.simulated_tick", acks_late=True, time_limit=60)
def simulated_agents_tick_task() -> int:
    return simulated_tick(grace_seconds=scheduler_config_get().preemption_grace_seconds)


@shared_task(name="scheduler.rounds_prune", time_limit=600)
def scheduling_rounds_prune_task() -> int:
    return scheduling_rounds_prune(now=timezone.now(), keep_days=settings.GPULAB_ROUND_HISTORY_DAYS)


# The budget (GPULAB_FORECAST_BUDGET_SECONDS, at most 50 s) bounds the replay; the limits
# leave room for the snapshot and the writes, and stay under the next minute's run.
@shared_task(name="scheduler.forecast", soft_time_limit=55, time_limit=58)
def start_forecasts_task() -> dict[str, object]:
    summary = start_forecasts_refresh(now=timezone.now())
    return {"pending": summary.pending, "estimated": summary.estimated}
