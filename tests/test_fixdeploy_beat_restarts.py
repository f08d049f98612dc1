"""Hourly and daily beat entries still run when beat restarts more often than that.

In the container, beat's schedule file (when each entry last ran) is lost at every
redeploy, so a restarted beat starts each entry afresh, as Celery does: last run = now.
An interval entry then counts from the restart; one at a time of day does not. This
replays beat's own `is_due` minute by minute over two days of restarts, no beat process.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest
from celery.schedules import BaseSchedule, maybe_schedule

from config.celery_app import app

START = datetime(2026, 11, 2, 0, 7, tzinfo=UTC)


def _runs(task: str, *, restart_every: timedelta, span: timedelta) -> int:
    """How many times beat runs `task` over `span` if it restarts every `restart_every`."""
    app.loader.import_default_modules()
    (entry,) = [e for e in app.conf.beat_schedule.values() if e["task"] == task]
    schedule = maybe_schedule(copy.deepcopy(entry["schedule"]), app=app)
    assert isinstance(schedule, BaseSchedule)
    now = START
    schedule.nowfun = lambda: now  # beat's clock, replayed
    runs = 0
    last_run = START
    while now < START + span:
        if (now - START) % restart_every == timedelta(0):
            last_run = now  # a fresh beat: no schedule file, each entry "last ran" now
        if schedule.is_due(last_run).is_due:
            runs += 1
            last_run = now
        now += timedelta(minutes=1)
    return runs


@pytest.mark.parametrize("task", ["housekeeping.sessions_clear", "scheduler.rounds_prune"])
def test_daily_housekeeping_runs_every_day_with_a_redeploy_every_10_hours(task: str) -> None:
    assert _runs(task, restart_every=timedelta(hours=10), span=timedelta(days=2)) == 2


def test_the_hourly_prune_runs_every_hour_with_a_redeploy_every_25_minutes() -> None:
    runs = _runs("agents.prune_all", restart_every=timedelta(minutes=25), span=timedelta(hours=4))
    assert runs == 4
