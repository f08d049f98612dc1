"""GET /api/v1/utilization/?window=24h|7d|30d: allocated vs used, GPU-hours, idle GPUs."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api_errors import FIELD_ERRORS, NOT_AUTHENTICATED
from config.api_params import query_params_check
from config.errors import ValidationFailed

from ..selectors.utilization import (
    DEFAULT_WINDOW,
    IDLE_THRESHOLD_PCT,
    IDLE_WINDOW,
    WINDOWS,
    allocation_series,
    idle_allocated_jobs,
    usage_breakdown,
    window_get,
)


class SeriesPointOutput(serializers.Serializer):
    at = serializers.DateTimeField(help_text="Start of the averaging bucket.")
    devices = serializers.IntegerField()
    allocated = serializers.FloatField(help_text="Mean GPUs held by jobs over the bucket.")
    allocated_peak = serializers.IntegerField(
        help_text="Most GPUs held by jobs at one sample of the bucket."
    )
    used = serializers.FloatField(
        help_text="Mean GPUs' worth busy (sum of utilization fractions) over the bucket, "
        "held or not."
    )
    used_allocated = serializers.FloatField(
        allow_null=True,
        help_text="The same, over the GPUs held by jobs only (a free GPU's load, or a "
        "cancelled job's process still stopping, is not counted); null for a bucket with "
        "samples taken before this was recorded.",
    )


class TypeSeriesOutput(serializers.Serializer):
    device_type = serializers.CharField()
    points = SeriesPointOutput(many=True)


class UsageSeriesOutput(serializers.Serializer):
    label = serializers.CharField(help_text="User name, group name, or 'Other users'.")
    user = serializers.CharField(
        allow_null=True, help_text="The user's name; null for the 'Other users' row and groups."
    )
    mine = serializers.BooleanField()
    others = serializers.BooleanField(help_text="Students: everyone else's use, summed.")
    total = serializers.FloatField(help_text="GPU-hours over the window.")
    gpu_hours = serializers.ListField(
        child=serializers.FloatField(), help_text="GPU-hours in each period of `periods`."
    )


class UsageOutput(serializers.Serializer):
    period = serializers.ChoiceField(choices=["hour", "day"])
    periods = serializers.ListField(
        child=serializers.DateTimeField(), help_text="Start of each period, oldest first."
    )
    total = serializers.FloatField()
    by_user = UsageSeriesOutput(many=True)
    by_group = UsageSeriesOutput(many=True)


class IdleJobOutput(serializers.Serializer):
    job_id = serializers.IntegerField()
    name = serializers.CharField()
    owner = serializers.CharField()
    gpus = serializers.IntegerField()
    devices = serializers.ListField(child=serializers.CharField(), help_text="node/index")
    held_seconds = serializers.FloatField()
    utilization_avg = serializers.FloatField(help_text="Mean % over the GPUs it holds.")


class IdleOutput(serializers.Serializer):
    window_minutes = serializers.IntegerField()
    threshold_pct = serializers.FloatField()
    running = serializers.IntegerField(help_text="Running jobs holding GPUs (that you may see).")
    without_readings = serializers.IntegerField(
        help_text="Of those, jobs with no per-job GPU reading in the window (not judged)."
    )
    jobs = IdleJobOutput(many=True)


class UtilizationOutput(serializers.Serializer):
    window = serializers.ChoiceField(choices=list(WINDOWS))
    start = serializers.DateTimeField(
        help_text="Start of the window: of its first hour (24h) or local day (7d, 30d), so "
        "24h is the last 24 hours with this one, 7d and 30d the last days with today; "
        "equal to `usage.periods[0]`. `series` starts here too."
    )
    end = serializers.DateTimeField(help_text="Now: the window's last period is still going.")
    bucket_seconds = serializers.IntegerField(help_text="Averaging bucket of `series`.")
    series = TypeSeriesOutput(many=True)
    usage = UsageOutput()
    idle_allocated = IdleOutput()


class UtilizationApi(APIView):
    @extend_schema(
        summary="GPUs allocated vs used, GPU-hours per user and group, idle allocations",
        description=(
            "Allocated and used GPUs per device type over the window (averaged into at most "
            "~600 points a series); GPU-hours per user and per group for each hour (24h) or "
            "local day (7d, 30d). The window runs from `start` (the start of its first hour, "
            "or local day: 7d is the last 7 days with today) to now; running jobs whose GPUs "
            "averaged below 10 % use over the last 15 minutes. Students see their own "
            "GPU-hours and everyone else's summed as 'Other users', and only their own jobs "
            "(and a coordinator their groups' jobs) in the idle list; admins see everyone."
        ),
        parameters=[
            OpenApiParameter(
                "window", str, enum=list(WINDOWS), default=DEFAULT_WINDOW.key, required=False
            )
        ],
        responses={200: UtilizationOutput, 400: FIELD_ERRORS, 401: NOT_AUTHENTICATED},
    )
    def get(self, request: Request) -> Response:
        query_params_check(request, allowed=["window"])
        key = request.query_params.get("window", DEFAULT_WINDOW.key)
        window = window_get(key)
        if window is None:
            raise ValidationFailed({"window": [f"Choose one of: {', '.join(WINDOWS)}."]})
        now = timezone.now()
        usage = usage_breakdown(viewer=request.user, window=window, now=now)
        idle = idle_allocated_jobs(viewer=request.user, now=now)
        data = {
            "window": window.key,
            # The window starts where its first period does, so `start` and `periods` agree.
            "start": usage.periods[0],
            "end": now,
            "bucket_seconds": int(window.series_bucket.total_seconds()),
            "series": allocation_series(window=window, now=now),
            "usage": usage,
            "idle_allocated": {
                "window_minutes": int(IDLE_WINDOW.total_seconds() // 60),
                "threshold_pct": IDLE_THRESHOLD_PCT,
                "running": idle.running,
                "without_readings": idle.without_readings,
                "jobs": idle.jobs,
            },
        }
        return Response(UtilizationOutput(data).data)
