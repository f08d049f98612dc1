"""GET /api/v1/fairness/: the fairness page's data (shares, weights, Jain, fair-share order)."""

from __future__ import annotations

import dataclasses

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api_errors import FIELD_ERRORS, NOT_AUTHENTICATED
from config.api_params import query_params_check
from config.errors import ValidationFailed

from ..selectors.fairness import DEFAULT_WINDOW, WINDOWS, fairness_report, window_parse


class FairnessShareOutput(serializers.Serializer):
    name = serializers.CharField(
        help_text='Group or user name; "other users" sums everyone else for a student.'
    )
    gpu_hours = serializers.FloatField()
    normalized_hours = serializers.FloatField(help_text="GPU-hours × device-type speed.")
    share = serializers.FloatField(help_text="Fraction of the window's normalized GPU-time.")
    weight = serializers.FloatField(allow_null=True, help_text='Null on "other users".')
    entitled = serializers.FloatField(
        help_text="A group: weight / Σ weights of the participating groups. A user: user "
        "weight × group weight (for a user in several groups, of the group where that is "
        "largest) / the same over all participating users, the scheduler's fair-share rule. "
        "Participants used GPUs in the window or have jobs now."
    )
    ratio = serializers.FloatField(allow_null=True, help_text="share / entitled.")
    is_self = serializers.BooleanField()
    is_aggregate = serializers.BooleanField()


class FairnessOrderOutput(serializers.Serializer):
    rank = serializers.IntegerField(help_text="1 is served first; equal usage shares a rank.")
    user = serializers.CharField(
        allow_null=True, help_text="Null for another user (students see only themselves)."
    )
    group = serializers.CharField(allow_null=True)
    is_self = serializers.BooleanField()
    usage_hours = serializers.FloatField(allow_null=True, help_text="Decayed, normalized.")
    user_weight = serializers.FloatField(allow_null=True)
    group_weight = serializers.FloatField(allow_null=True)
    group_share = serializers.FloatField(allow_null=True)
    normalized_usage = serializers.FloatField(
        allow_null=True, help_text="usage_seconds / (user weight × group share); lowest first."
    )
    pending_jobs = serializers.IntegerField(allow_null=True)
    running_jobs = serializers.IntegerField(allow_null=True)


class FairnessOutput(serializers.Serializer):
    window = serializers.CharField()
    since = serializers.DateTimeField(
        help_text="Start of the window: of its first hour (24h) or local day (7d, 30d), as "
        "`start` of /api/v1/utilization/."
    )
    normalized_hours = serializers.FloatField()
    group_jain = serializers.FloatField(allow_null=True, help_text="Null when nothing was used.")
    user_jain = serializers.FloatField(allow_null=True)
    groups = FairnessShareOutput(many=True)
    users = FairnessShareOutput(many=True)
    order = FairnessOrderOutput(many=True)
    policy = serializers.CharField()
    fairness = serializers.FloatField()
    fair_share_applies = serializers.BooleanField(
        help_text="Whether the current policy and fairness setting use this order."
    )
    half_life_hours = serializers.FloatField()
    aggregates_at = serializers.DateTimeField(allow_null=True)


class FairnessApi(APIView):
    @extend_schema(
        summary="Shares of GPU-time vs entitled shares, Jain's index, fair-share order",
        description=(
            "Per group and per user: share of normalized GPU-time over the window vs the "
            "entitled share, Jain's fairness index over share / entitled, and the order in which "
            "the scheduler's fair share serves users with active jobs now. Students see every "
            "group but only themselves among users (others are summed as 'other users' and "
            "appear in the order as a rank only)."
        ),
        parameters=[OpenApiParameter("window", str, enum=list(WINDOWS), default=DEFAULT_WINDOW)],
        responses={200: FairnessOutput, 400: FIELD_ERRORS, 401: NOT_AUTHENTICATED},
    )
    def get(self, request: Request) -> Response:
        query_params_check(request, allowed=["window"])
        raw = request.query_params.get("window")
        # Absent means the default; empty is refused, as on /api/v1/utilization/.
        window = DEFAULT_WINDOW if raw is None else window_parse(raw)
        if window is None:
            raise ValidationFailed({"window": [f"Choose one of: {', '.join(WINDOWS)}."]})
        report = fairness_report(viewer=request.user, window=window)
        data = {
            **{field.name: getattr(report, field.name) for field in dataclasses.fields(report)},
            "groups": [dataclasses.asdict(row) for row in report.groups],
            "users": [dataclasses.asdict(row) for row in report.users],
            "order": [dataclasses.asdict(row) for row in report.order],
            "fair_share_applies": report.fair_share_applies,
        }
        return Response(FairnessOutput(data).data)
