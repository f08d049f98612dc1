"""The utilization page: allocated vs used per device type, GPU-hours per user and group,
the per-GPU heatmap of the last 24 h, and running jobs that hold GPUs they barely use.

Thin: `dashboard.selectors.utilization` reads (and redacts), this module turns the numbers
into Plotly figures, and every figure has a table or sentence beside it with the same
numbers, so the page reads without the charts (and without JavaScript).
"""

from __future__ import annotations

from datetime import datetime

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from accounts.choices import Role
from accounts.models import User

from ..charts import PALETTE, figure_json, figure_new, hour_categories, time_axis
from ..selectors.aggregates import cached_on_aggregates
from ..selectors.utilization import (
    DEFAULT_WINDOW,
    IDLE_THRESHOLD_PCT,
    IDLE_WINDOW,
    WINDOWS,
    Heatmap,
    TypeSeries,
    UsageBreakdown,
    UsageSeries,
    Window,
    allocation_series,
    device_heatmap,
    idle_allocated_jobs,
    usage_breakdown,
    usage_breakdown_redacted,
    window_get,
)

REFRESH_SECONDS = 60
# Admins all see the same usage breakdown; an unsaved admin (owning no usage) stands for them.
ANY_ADMIN = User(role=Role.ADMIN)
# The end of a hovertemplate that names the trace.
NAMED = "<extra>%{fullData.name}</extra>"


def _time_figure(*, y_title: str) -> go.Figure:
    # Date ticks take two lines (time, then the date): keep the legend clear of them.
    figure = figure_new(y_title=y_title, height=360)
    figure.update_layout(legend={"y": -0.3})
    return figure


def _empty(figure: go.Figure, text: str) -> go.Figure:
    figure.add_annotation(
        text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font={"size": 13}
    )
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False)
    return figure


def allocated_used_figure(series: list[TypeSeries]) -> go.Figure:
    """Per device type: GPUs allocated (solid) and GPUs' worth used (dashed), one colour."""
    figure = _time_figure(y_title="GPUs")
    if not any(s.points for s in series):
        return _empty(figure, "No utilization samples in this window yet.")
    # One x for every type; distinct also across a daylight saving change (`TimeAxis`).
    axis = time_axis(point.at for type_series in series for point in type_series.points)
    for i, type_series in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        points = axis.points([point.at for point in type_series.points])
        figure.add_trace(
            go.Scatter(
                **points,
                y=[point.allocated for point in type_series.points],
                name=f"{type_series.device_type} allocated",
                mode="lines",
                line={"color": colour, "width": 2, "shape": "hv"},
                hovertemplate=f"{axis.hover}<br>%{{y:.1f}} allocated{NAMED}",
            )
        )
        figure.add_trace(
            go.Scatter(
                **points,
                y=[point.used for point in type_series.points],
                name=f"{type_series.device_type} used",
                mode="lines",
                line={"color": colour, "width": 2, "dash": "dot"},
                hovertemplate=f"{axis.hover}<br>%{{y:.2f}} used{NAMED}",
            )
        )
    figure.update_xaxes(**axis.axis)
    figure.update_yaxes(rangemode="tozero")
    return figure


def usage_figure(usage: UsageBreakdown, series: list[UsageSeries]) -> go.Figure:
    """GPU-hours stacked per hour or per day, one bar segment per user or group."""
    figure = _time_figure(y_title="GPU-hours")
    if not series:
        return _empty(figure, "No GPU time used in this window.")
    if usage.period == "hour":
        # One category per local hour: a date axis would draw a repeated DST hour twice at
        # one x (`hour_categories`).
        x, x_axis = hour_categories(usage.periods)
        figure.update_xaxes(**x_axis)
    else:
        x = [f"{period:%Y-%m-%d}" for period in usage.periods]
    for i, one in enumerate(series):
        figure.add_trace(
            go.Bar(
                x=x,
                y=one.gpu_hours,
                name=one.label,
                marker={"color": "#9aa3b0" if one.others else PALETTE[i % len(PALETTE)]},
                hovertemplate="%{x}<br>%{y:.2f} GPU-hours<extra>%{fullData.name}</extra>",
            )
        )
    figure.update_layout(barmode="stack", bargap=0.15)
    return figure


def heatmap_figure(heatmap: Heatmap) -> go.Figure:
    """Rows: devices (node/index; a replaced GPU's own row is marked retired); columns:
    15-minute buckets; colour: mean utilization %."""
    height = max(240, 90 + 16 * len(heatmap.rows))
    figure = figure_new(height=height)
    if not heatmap.rows:
        return _empty(figure, "No devices registered yet.")
    # Columns distinct also across a daylight saving change (`TimeAxis`); there, a heatmap
    # takes its hover text per cell.
    axis = time_axis(heatmap.starts)
    points = axis.points(heatmap.starts)
    if axis.offset is not None:
        points["text"] = [points["text"]] * len(heatmap.rows)
    figure.add_trace(
        go.Heatmap(
            **points,
            y=[row.label for row in heatmap.rows],
            z=[row.values for row in heatmap.rows],
            zmin=0,
            zmax=100,
            colorscale="Blues",
            colorbar={"title": {"text": "%"}, "thickness": 12},
            hoverongaps=False,
            hovertemplate=f"%{{y}} · {axis.hover}<br>%{{z:.0f}} % used<extra></extra>",
        )
    )
    figure.update_xaxes(**axis.axis)
    # Devices top to bottom in the order of the table below.
    figure.update_yaxes(autorange="reversed", type="category")
    # Room for the longest label ("a0/0 (retired 14:05)"), at about 7 px a character.
    longest = max(len(row.label) for row in heatmap.rows)
    figure.update_layout(margin={"l": max(90, 7 * longest)})
    return figure


def _cluster_part(window: Window, as_of: datetime | None) -> dict[str, object]:
    """What every viewer sees alike, built only from aggregates (cached per run)."""
    now = as_of or timezone.now()
    series = allocation_series(window=window, now=now)
    heatmap = device_heatmap(now=now)
    readings = [row for row in heatmap.rows if row.mean is not None]
    return {
        "series": series,
        "heatmap": heatmap,
        "heatmap_busiest": max(readings, key=lambda row: row.mean, default=None),
        "heatmap_idlest": min(readings, key=lambda row: row.mean, default=None),
        "heatmap_below_idle": sum(1 for row in readings if row.mean < IDLE_THRESHOLD_PCT),
        "heatmap_reporting": len(readings),
        "allocated_used_json": figure_json(allocated_used_figure(series)),
        "heatmap_json": figure_json(heatmap_figure(heatmap)),
    }


def _usage_part(viewer: User, window: Window, as_of: datetime | None) -> dict[str, object]:
    """GPU-hours as this viewer may see them (a student: own row; an admin: everyone's).

    A student's breakdown is cut from the admins' one (shared, built once per run), so a
    student's first visit after a run only draws two figures and reads no table. The admins'
    part is built for ANY_ADMIN, whoever asks first: it is shared by every admin, so it
    must not mark one admin's row as theirs (`utilization_page` marks each admin's own).
    """
    if viewer.is_lab_admin:
        usage = usage_breakdown(viewer=ANY_ADMIN, window=window, now=as_of or timezone.now())
    else:
        full = cached_on_aggregates(
            usage_cache_key(window, ANY_ADMIN),
            lambda run_as_of: _usage_part(ANY_ADMIN, window, run_as_of),
        )["usage"]
        usage = usage_breakdown_redacted(full, viewer=viewer)
    return {
        "usage": usage,
        "usage_user_json": figure_json(usage_figure(usage, usage.by_user)),
        "usage_group_json": figure_json(usage_figure(usage, usage.by_group)),
    }


def utilization_cache_key(window: Window) -> str:
    # "v2": its series points gained fields (peak, allocated GPUs' use); a point cached by
    # the code before would lack them until the next aggregation run.
    return f"utilization-v2:{window.key}"


def usage_cache_key(window: Window, viewer: User) -> str:
    # Students' usage figures differ per student (their own row); admins' are all alike.
    scope = "admin" if viewer.is_lab_admin else f"user{viewer.pk}"
    return f"utilization-usage:{window.key}:{scope}"


def utilization_figures_warm() -> None:
    """Build the figures every viewer shares, for every window, into the per-run cache."""
    for window in WINDOWS.values():
        cached_on_aggregates(
            utilization_cache_key(window), lambda as_of, w=window: _cluster_part(w, as_of)
        )
    # Admins all see the same usage figures; students' are cut from them on first visit.
    for window in WINDOWS.values():
        cached_on_aggregates(
            usage_cache_key(window, ANY_ADMIN),
            lambda as_of, w=window: _usage_part(ANY_ADMIN, w, as_of),
        )


@login_required
def utilization_page(request: HttpRequest) -> HttpResponse:
    window = window_get(request.GET.get("window")) or DEFAULT_WINDOW
    cluster_part = cached_on_aggregates(
        utilization_cache_key(window), lambda as_of: _cluster_part(window, as_of)
    )
    usage_part = cached_on_aggregates(
        usage_cache_key(window, request.user),
        lambda as_of: _usage_part(request.user, window, as_of),
    )
    if request.user.is_lab_admin:
        # The admins' breakdown is shared; only this admin's own row is theirs.
        usage = usage_breakdown_redacted(usage_part["usage"], viewer=request.user)
        usage_part = {**usage_part, "usage": usage}
    # Live, not cached: which running jobs hold GPUs they barely use right now.
    idle = idle_allocated_jobs(viewer=request.user, now=timezone.now())
    return render(
        request,
        "dashboard/utilization.html",
        {
            **cluster_part,
            **usage_part,
            "window": window,
            "windows": list(WINDOWS.values()),
            "idle": idle,
            "idle_threshold": int(IDLE_THRESHOLD_PCT),
            "idle_minutes": int(IDLE_WINDOW.total_seconds() // 60),
            "charts": True,
            "refresh_seconds": REFRESH_SECONDS,
        },
    )
