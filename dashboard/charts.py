"""Plotly figures for the pages: one house style, and JSON that `static/js/gpulab.js` draws.

Views build a `plotly.graph_objects.Figure`, pass `figure_json(fig)` to the template, and
include `dashboard/partials/chart.html`. The browser draws it with the plotly.js shipped in
the `plotly` package (see `dashboard.finders`), and auto-refresh redraws it in place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import plotly.graph_objects as go
from django.utils import timezone

from .services import HOUR, hour_starts

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


# Explicit ticks of a `TimeAxis` across a daylight saving change: the smallest step that
# leaves at most MAX_TICK_GAPS gaps between ticks (24 h: every 6 h, 7 d: daily, 30 d: weekly).
MAX_TICK_GAPS = 7
TICK_HOURS = (1, 2, 3, 6, 12)
TICK_DAYS = (1, 2, 7, 14)


def _repeat_suffix(local: datetime) -> str:
    """The zone's abbreviation (" EDT") where the wall clock reads `local`'s time twice
    (01:30 EDT, then 01:30 EST), or its UTC offset where even that repeats; else ""."""
    twin = local.replace(fold=1 - local.fold)
    if twin.utcoffset() == local.utcoffset():
        return ""
    name = local.tzname()
    return f" {name}" if name and name != twin.tzname() else f" {_utc_offset(local)}"


def wall_clock_label(moment: datetime) -> str:
    """`chart_time`, with the zone where the wall clock reads that time twice."""
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M}{_repeat_suffix(local)}"


@dataclass(frozen=True)
class TimeAxis:
    """Where a line or heatmap over time draws its moments, and how it names them.

    plotly.js reads a date string's wall clock and drops its UTC offset, so x is local
    wall-clock text (`chart_time`). Where the zone's offset changes within the chart, that
    text repeats an hour (autumn: 01:00 EDT, then 01:00 EST, drawn at one x) or skips one.
    There, x is every moment at one fixed offset, that of the chart's last moment: a date
    axis that runs evenly in real time, which the chart's ticks (`axis`) and hover text
    (`hover`, `points`) label with the true wall clock. Elsewhere x is the wall clock
    itself, plotly places the ticks, and the figure is what it always was.
    """

    offset: timedelta | None  # the fixed offset of x; None: x is the wall clock
    axis: dict[str, object]  # x-axis settings (explicit ticks across a change)
    # x to the second, for moments closer than a minute (a job's raw GPU readings);
    # otherwise to the minute, as `chart_time` writes it.
    seconds: bool = False

    @property
    def hover(self) -> str:
        """What a hovertemplate names the moment by."""
        return "%{x}" if self.offset is None else "%{text}"

    def x(self, moments: Iterable[datetime]) -> list[str]:
        shape = "%Y-%m-%d %H:%M:%S" if self.seconds else "%Y-%m-%d %H:%M"
        if self.offset is None:
            return [timezone.localtime(moment).strftime(shape) for moment in moments]
        return [(moment.astimezone(UTC) + self.offset).strftime(shape) for moment in moments]

    def points(self, moments: Sequence[datetime]) -> dict[str, list[str]]:
        """A trace's `x` and, across a change, its `text` (the wall clock, for `hover`)."""
        if self.offset is None:
            return {"x": self.x(moments)}
        return {"x": self.x(moments), "text": [wall_clock_label(m) for m in moments]}


def time_axis(moments: Iterable[datetime], *, seconds: bool = False) -> TimeAxis:
    """The `TimeAxis` of a chart of `moments` (all its traces', so they share one x);
    `seconds`: x to the second (`TimeAxis.seconds`)."""
    moments = sorted(moments)
    if len({timezone.localtime(moment).utcoffset() for moment in moments}) < 2:
        return TimeAxis(offset=None, axis={}, seconds=seconds)
    first, last = moments[0], moments[-1]
    fixed = TimeAxis(
        offset=timezone.localtime(last).utcoffset() or timedelta(0), axis={}, seconds=seconds
    )
    span_hours = (last - first) / HOUR
    hours = next((step for step in TICK_HOURS if span_hours / step <= MAX_TICK_GAPS), None)
    days = next(
        (step for step in TICK_DAYS if span_hours / 24 / step <= MAX_TICK_GAPS), TICK_DAYS[-1]
    )
    tickvals: list[str] = []
    ticktext: list[str] = []
    # Ticks on local hour starts: `hour_starts` follows the zone's real hours, also on the
    # day of a change.
    for start in hour_starts(first, last):
        local = timezone.localtime(start)
        if start < first:
            continue
        if hours is not None:  # every few hours, dated (as plotly dates) first and at midnight
            if local.minute or local.hour % hours:
                continue
            text = f"{local:%H:%M}{_repeat_suffix(local)}"
            if not tickvals or local.hour == 0:
                text += f"<br>{local:%b} {local.day}, {local.year}"
        else:  # at the start of every day or few days, the year on the first tick
            if timezone.localdate(start - timedelta(microseconds=1)) == local.date():
                continue  # not the day's first hour
            if local.date().toordinal() % days:
                continue
            text = f"{local:%b} {local.day}"
            if not tickvals:
                text += f"<br>{local.year}"
        tickvals.extend(fixed.x([start]))
        ticktext.append(text)
    return TimeAxis(
        offset=fixed.offset,
        axis={"type": "date", "tickmode": "array", "tickvals": tickvals, "ticktext": ticktext},
        seconds=seconds,
    )
