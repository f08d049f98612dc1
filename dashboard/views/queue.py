"""The queue page: where every job stands, why, and what is ahead of it."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from ..charts import chart_time, figure_json, figure_new
from ..selectors import queue as queue_selectors
from ..selectors.aggregates import cached_on_aggregates

PAGE_SIZE = 50


def queue_length_figure_cached() -> str:
    """The queue-length figure, built once per aggregation run (only QueueSample feeds it)."""
    return cached_on_aggregates(
        "queue-length",
        lambda as_of: figure_json(_queue_length_figure(as_of or timezone.now())),
    )


@login_required
def queue_page(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    order = queue_selectors.pending_order()
    page = Paginator(order, PAGE_SIZE).get_page(request.GET.get("page"))
    view = queue_selectors.queue_view(viewer=request.user, order=order, page_rows=page.object_list)
    return render(
        request,
        "dashboard/queue.html",
        {
            "view": view,
            "page": page,
            "charts": True,
            "refresh_seconds": 10,
            # Built only from QueueSample rows: cached per aggregation run (exact).
            "queue_length_figure": queue_length_figure_cached(),
            "wait_figure": figure_json(_wait_figure(now)),
        },
    )


def _queue_length_figure(now):  # type: ignore[no-untyped-def]
    series = queue_selectors.queue_length_series(since=now - timedelta(hours=24))
    figure = figure_new(y_title="pending jobs", height=300)
    for level, points in sorted(series.items()):
        figure.add_scatter(
            x=[chart_time(at) for at, _ in points],
            y=[pending for _, pending in points],
            name=f"queue {level}",
            mode="lines",
            stackgroup="levels",
            line={"width": 1},
        )
    if not series:
        figure.add_annotation(
            text="No samples yet", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
        )
    return figure


def _wait_figure(now):  # type: ignore[no-untyped-def]
    started = queue_selectors.queueing_delay_histogram(since=now - timedelta(days=7))
    pending = queue_selectors.pending_wait_histogram(entries_waits=queue_selectors.pending_waits())
    figure = figure_new(y_title="jobs", height=300)
    figure.add_bar(
        x=[label for label, _ in started],
        y=[count for _, count in started],
        name="waited before starting (last 7 days)",
    )
    figure.add_bar(
        x=[label for label, _ in pending], y=[count for _, count in pending], name="waiting now"
    )
    figure.update_layout(barmode="group")
    return figure
