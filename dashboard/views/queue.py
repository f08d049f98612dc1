"""The queue page: where every job stands, why, and what is ahead of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from ..charts import figure_json, figure_new, time_axis
from ..selectors import queue as queue_selectors
from ..selectors.aggregates import cached_on_aggregates
from ..selectors.quotas import quota_status

PAGE_SIZE = 50


@dataclass(frozen=True)
class QueueLevelSummary:
    """One queue level over the chart's 24 h, for readers who cannot see the chart."""

    level: int
    latest: int  # pending jobs at the newest sample
    peak: int
    mean: float


@dataclass(frozen=True)
class QueueLengthChart:
    """The queue-length figure and what it shows in numbers, cached together."""

    figure: str  # JSON
    levels: list[QueueLevelSummary]
    latest_at: datetime | None  # the newest sample

    @property
    def latest_total(self) -> int:
        return sum(level.latest for level in self.levels)

    @property
    def latest_busy(self) -> list[QueueLevelSummary]:
        """The levels with jobs pending at the newest sample (the sentence names only these)."""
        return [level for level in self.levels if level.latest]


def queue_length_figure_cached() -> QueueLengthChart:
    """The queue-length figure and its text alternative, built once per aggregation run
    (only QueueSample feeds them)."""
    # Not the old key "queue-length": that held the figure alone, a string.
    return cached_on_aggregates(
        "queue-length-chart", lambda as_of: _queue_length_chart(as_of or timezone.now())
    )


@login_required
def queue_page(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    order = queue_selectors.pending_order()
    page = Paginator(order, PAGE_SIZE).get_page(request.GET.get("page"))
    view = queue_selectors.queue_view(viewer=request.user, order=order, page_rows=page.object_list)
    started = queue_selectors.queueing_delay_histogram(since=now - timedelta(days=7))
    pending = queue_selectors.pending_wait_histogram(entries_waits=queue_selectors.pending_waits())
    queue_length = queue_length_figure_cached()
    return render(
        request,
        "dashboard/queue.html",
        {
            "view": view,
            "page": page,
            # About the viewer alone, admins included: their own account and groups (the
            # admin quotas page is where everyone's limits are set).
            "quotas": quota_status(user=request.user),
            "now": now,
            "charts": True,
            "refresh_seconds": 10,
            # Built only from QueueSample rows: cached per aggregation run (exact).
            "queue_length_figure": queue_length.figure,
            "wait_figure": figure_json(_wait_figure(started=started, pending=pending)),
            # The charts' numbers as text and tables, for screen readers and pages without
            # JavaScript.
            "queue_length": queue_length,
            "waits": [
                (label, started_count, pending_count)
                for (label, started_count), (_, pending_count) in zip(started, pending, strict=True)
            ],
            "waits_started": sum(count for _, count in started),
            "waits_pending": sum(count for _, count in pending),
        },
    )


def _queue_length_chart(now: datetime) -> QueueLengthChart:
    series = queue_selectors.queue_length_series(since=now - timedelta(hours=24))
    levels = [
        QueueLevelSummary(
            level=level,
            latest=points[-1][1],
            peak=max(pending for _, pending in points),
            mean=sum(pending for _, pending in points) / len(points),
        )
        for level, points in sorted(series.items())
    ]
    latest_at = max((points[-1][0] for points in series.values()), default=None)
    return QueueLengthChart(
        figure=figure_json(_queue_length_figure(series)), levels=levels, latest_at=latest_at
    )


def _queue_length_figure(series):  # type: ignore[no-untyped-def]
    figure = figure_new(y_title="pending jobs", height=300)
    # One x for every level; distinct also across a daylight saving change (`TimeAxis`).
    axis = time_axis(at for points in series.values() for at, _ in points)
    for level, points in sorted(series.items()):
        trace_x = axis.points([at for at, _ in points])
        if axis.offset is not None:
            # The wall clock for hover; stacked areas otherwise name their point by x.
            trace_x["hovertemplate"] = f"{axis.hover}<br>%{{y}}<extra>%{{fullData.name}}</extra>"
        figure.add_scatter(
            **trace_x,
            y=[pending for _, pending in points],
            name=f"queue {level}",
            mode="lines",
            stackgroup="levels",
            line={"width": 1},
        )
    figure.update_xaxes(**axis.axis)
    if not series:
        figure.add_annotation(
            text="No samples yet", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
        )
    return figure


def _wait_figure(*, started, pending):  # type: ignore[no-untyped-def]
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
