"""The fairness page: shares of GPU-time vs entitled shares, Jain's index, fair-share order.

Thin: `dashboard.selectors.fairness` reads, ranks and redacts (the same report feeds the
API), this view only draws the two charts and renders.
"""

from __future__ import annotations

from functools import lru_cache

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from ..charts import figure_json, figure_new
from ..selectors.fairness import DEFAULT_WINDOW, WINDOWS, ShareRow, fairness_report, window_parse
from ..selectors.utilization import WINDOWS as USAGE_WINDOWS

REFRESH_SECONDS = 60
WINDOW_LABELS = {"24h": "Last 24 hours", "7d": "Last 7 days", "30d": "Last 30 days"}


# Memoized by its inputs: building a Plotly figure validates every property (tens of ms),
# while the rows change at most once a minute, when the aggregates do, and are the same for
# every admin. Rows are frozen dataclasses (hashable); bounded, per process.
@lru_cache(maxsize=64)
def share_figure(rows: tuple[ShareRow, ...], *, title: str) -> str:
    """Grouped bars per group (or user): share of GPU-time next to the entitled share, in %."""
    figure = figure_new(title=title, y_title="% of normalized GPU-time")
    names = [f"{row.name} (you)" if row.is_self else row.name for row in rows]
    figure.add_bar(
        name="share of GPU-time",
        x=names,
        y=[round(row.share * 100, 2) for row in rows],
        hovertemplate="%{x}: %{y:.1f}% of GPU-time<extra></extra>",
    )
    figure.add_bar(
        name="entitled share",
        x=names,
        y=[round(row.entitled * 100, 2) for row in rows],
        hovertemplate="%{x}: entitled to %{y:.1f}%<extra></extra>",
    )
    figure.update_layout(barmode="group")
    figure.update_yaxes(rangemode="tozero", ticksuffix="%")
    return figure_json(figure)


@login_required
def fairness_page(request: HttpRequest) -> HttpResponse:
    # An unknown window falls back to the default: a page link should never break.
    window = window_parse(request.GET.get("window")) or DEFAULT_WINDOW
    report = fairness_report(viewer=request.user, window=window)
    return render(
        request,
        "dashboard/fairness.html",
        {
            "report": report,
            "window": window,
            "windows": [(key, WINDOW_LABELS[key]) for key in WINDOWS],
            # The same span as the utilization page's window of that name.
            "window_label": USAGE_WINDOWS[window].covers.capitalize(),
            "group_figure": share_figure(
                report.groups, title="Groups: share of GPU-time vs entitled share"
            ),
            "user_figure": share_figure(
                report.users, title="Users: share of GPU-time vs entitled share"
            ),
            "charts": True,
            "refresh_seconds": REFRESH_SECONDS,
        },
    )
