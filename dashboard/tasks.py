"""Celery entry point for the dashboard's periodic aggregation (thin: one service call)."""

from __future__ import annotations

import dataclasses

from celery import shared_task

from .services import aggregates_update
from .warm import figure_caches_warm


@shared_task(name="dashboard.aggregates_update", time_limit=300, soft_time_limit=240)
def aggregates_update_task() -> dict[str, float]:
    result = aggregates_update()
    figure_caches_warm()
    return dataclasses.asdict(result)
