"""GET /api/v1/usage/ (admins; coordinators for their groups): GPU-hours per user and per
group and device type."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api_errors import FIELD_ERRORS, NOT_AUTHENTICATED, error_response
from config.api_params import query_params_check
from config.errors import ValidationFailed

from ..forms import UsageRangeForm
from ..selectors.usage import WaitStats, usage_report, usage_scope_for


class UsageReportRowOutput(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["user", "group"])
    name = serializers.CharField(help_text='User or group name; "(no group)" for jobs without.')
    device_type = serializers.CharField()
    gpu_hours = serializers.FloatField()
    normalized_gpu_hours = serializers.FloatField(help_text="GPU-hours × device-type speed.")


class UsageWaitOutput(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["user", "group", "all"])
    name = serializers.CharField()
    jobs_started = serializers.IntegerField(help_text="Jobs that first started in the range.")
    mean_wait_seconds = serializers.FloatField(
        help_text="From submission to first start (dependency holds, array caps and retry "
        "backoffs included)."
    )
    median_wait_seconds = serializers.FloatField()
    p95_wait_seconds = serializers.FloatField(help_text="Nearest-rank 95th percentile.")


class UsageReportOutput(serializers.Serializer):
    start = serializers.DateField()
    end = serializers.DateField()
    device_types = serializers.ListField(child=serializers.CharField())
    rows = UsageReportRowOutput(many=True)
    waits = UsageWaitOutput(many=True)
    all_waits = UsageWaitOutput(
        allow_null=True, help_text='Every job that first started in the range (kind "all").'
    )
    groups = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="The groups the report is limited to (a coordinator's); null: the whole lab.",
    )
    gpu_hours = serializers.FloatField(help_text="Total over every user in the report.")
    normalized_gpu_hours = serializers.FloatField()


class UsageApi(APIView):
    @extend_schema(
        summary="GPU-hours per user and per group, by device type (admins, coordinators)",
        description=(
            "From the hourly usage aggregate, both days included, in the lab's time zone. "
            "Defaults to the last 30 days. One row per user (or group) and device type it used; "
            "`waits`: per user and group, how long the jobs that first started in the range "
            "waited for it. A group coordinator gets the groups they coordinate only "
            "(`groups`): each member's hours charged to them, and their jobs' waits."
        ),
        parameters=[
            OpenApiParameter("start", str, description="YYYY-MM-DD; default: 29 days before end."),
            OpenApiParameter("end", str, description="YYYY-MM-DD; default: today."),
        ],
        responses={
            200: UsageReportOutput,
            400: FIELD_ERRORS,
            401: NOT_AUTHENTICATED,
            403: error_response("Lab admins and group coordinators only."),
        },
    )
    def get(self, request: Request) -> Response:
        scope = usage_scope_for(request.user)
        query_params_check(request, allowed=["start", "end"])
        form = UsageRangeForm(request.query_params)
        if not form.is_valid():
            raise ValidationFailed(
                {field: [str(error) for error in errors] for field, errors in form.errors.items()}
            )
        report = usage_report(
            start=form.cleaned_data["start"], end=form.cleaned_data["end"], group_ids=scope
        )
        rows = [
            {
                "kind": line.kind,
                "name": line.name,
                "device_type": device_type,
                "gpu_hours": cell.gpu_hours,
                "normalized_gpu_hours": cell.normalized_hours,
            }
            for line in [*report.users, *report.groups]
            for device_type, cell in zip(report.device_types, line.cells, strict=True)
            if cell.gpu_hours or cell.normalized_hours
        ]
        data = {
            "start": report.start,
            "end": report.end,
            "device_types": report.device_types,
            "groups": None if report.scope is None else list(report.scope),
            "rows": rows,
            "waits": [
                _wait_row(line.kind, line.name, line.waits)
                for line in [*report.users, *report.groups]
                if line.waits is not None
            ],
            "all_waits": None if report.waits is None else _wait_row("all", "all", report.waits),
            "gpu_hours": report.total.gpu_hours,
            "normalized_gpu_hours": report.total.normalized_hours,
        }
        return Response(UsageReportOutput(data).data)


def _wait_row(kind: str, name: str, waits: WaitStats) -> dict[str, object]:
    return {
        "kind": kind,
        "name": name,
        "jobs_started": waits.started,
        "mean_wait_seconds": waits.mean_seconds,
        "median_wait_seconds": waits.median_seconds,
        "p95_wait_seconds": waits.p95_seconds,
    }
