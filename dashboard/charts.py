"""Plotly figures for the pages: one house style, and JSON that `static/js/gpulab.js` draws.

Views build a `plotly.graph_objects.Figure`, pass `figure_json(fig)` to the template, and
include `dashboard/partials/chart.html`. The browser draws it with the plotly.js shipped in
the `plotly` package (see `dashboard.finders`), and auto-refresh redraws it in place.
"""

from __future__ import annotations

from datetime import datetime

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
