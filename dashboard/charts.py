"""Plotly figures for the pages: one house style, and JSON that `static/js/gpulab.js` draws.

Views build a `plotly.graph_objects.Figure`, pass `figure_json(fig)` to the template, and
include `dashboard/partials/chart.html`. The browser draws it with the plotly.js shipped in
the `plotly` package (see `dashboard.finders`), and auto-refresh redraws it in place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

import plotly.graph_objects as go
from django.utils import timezone

# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]


def figure_new(
    *, title: str = "", x_title: str = "", y_title: str = "", height: int = 320
) -> go.Figure:
    """An empty figure in the house style: compact margins, legend below (fits 390 px)."""
    figure = go.Figure()
    figure.update_layout(
        # No Plotly template: the default one adds ~7 KB of JSON to every chart and costs
        # ~40 ms to build; the few style choices below are all the pages need.
        template="none",
        title={"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}} if title else None,
        height=height,
        margin={"l": 48, "r": 12, "t": 40 if title else 12, "b": 48},
        colorway=PALETTE,
        font={"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        # Below the plot, clear of two-line date ticks: fits a 390 px wide screen.
        legend={"orientation": "h", "yanchor": "top", "y": -0.25, "x": 0},
        paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff",
        hovermode="closest",
    )
    axis_style = {"gridcolor": "#eceff3", "linecolor": "#b9c0cb", "zeroline": False}
    figure.update_xaxes(title_text=x_title or None, showline=True, **axis_style)
    figure.update_yaxes(title_text=y_title or None, showgrid=True, **axis_style)
    return figure


def figure_json(figure: go.Figure) -> str:
    """The figure as JSON (Plotly's own encoder: handles numpy, datetimes and NaN)."""
    return figure.to_json()


def chart_time(moment: datetime) -> str:
    """A moment as plotly should draw it: wall-clock time in the display zone, because
    plotly.js ignores UTC offsets in date strings (an aware datetime is drawn in UTC)."""
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M")


def _utc_offset(moment: datetime) -> str:
    offset = moment.utcoffset() or timedelta(0)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(offset) // timedelta(minutes=1)
    return f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def hour_categories(periods: Sequence[datetime]) -> tuple[list[str], dict[str, object]]:
    """x values and x-axis settings for one bar per local hour (`periods`: their starts).

    Not a date axis: plotly.js drops the UTC offset of a date string, so the hour a daylight
    saving change repeats (01:00 EDT, then 01:00 EST) would draw twice at one x. Each hour is
    a category named by its wall-clock time, with the zone's abbreviation (or, if even that
    repeats, its UTC offset) where the wall clock repeats, so every bar has its own slot and
    hover label. Ticks every 6 local hours (four fit a phone's width unrotated), dated on the
    first one and at midnight, as plotly dates its own time axes.
    """
    local = [timezone.localtime(period) for period in periods]
    walls = [f"{moment:%Y-%m-%d %H:%M}" for moment in local]
    repeated = {wall for wall, count in Counter(walls).items() if count > 1}
    suffixes = [
        f" {moment:%Z}" if wall in repeated else ""
        for wall, moment in zip(walls, local, strict=True)
    ]
    labels = [wall + suffix for wall, suffix in zip(walls, suffixes, strict=True)]
    if len(set(labels)) < len(labels):  # the abbreviation did not change: the offset did
        suffixes = [
            f" {_utc_offset(moment)}" if wall in repeated else ""
            for wall, moment in zip(walls, local, strict=True)
        ]
        labels = [wall + suffix for wall, suffix in zip(walls, suffixes, strict=True)]
    tickvals: list[str] = []
    ticktext: list[str] = []
    for label, suffix, moment in zip(labels, suffixes, local, strict=True):
        if moment.minute or moment.hour % 6:
            continue
        text = f"{moment:%H:%M}{suffix}"
        if not tickvals or moment.hour == 0:
            text += f"<br>{moment:%b} {moment.day}"
        tickvals.append(label)
        ticktext.append(text)
    axis = {"type": "category", "tickmode": "array", "tickvals": tickvals, "ticktext": ticktext}
    return labels, axis
