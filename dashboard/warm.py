"""Build the shared dashboard figures right after an aggregation run.

They are cached per run (`dashboard.selectors.aggregates`); building them here, in the
periodic task, means no reader pays for them: the first page load after a run reads the
cache like every other one. Figures that differ per student are built on first visit.
"""

from __future__ import annotations

from .views.queue import queue_length_figure_cached
from .views.utilization import utilization_figures_warm


def figure_caches_warm() -> None:
    queue_length_figure_cached()
    utilization_figures_warm()
