"""Jobs REST API: each view is validate → service/selector → serialize."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from accounts.models import User
from config.errors import ValidationFailed

from .. import selectors, services
from ..choices import JobState
from .serializers import JobDetailOutput, JobOutput, JobSubmitInput


class JobListCreateApi(APIView):
    throttle_scope = "job_submit"

    def get_throttles(self):  # type: ignore[no-untyped-def]
        # Only submissions are rate-limited; reading the queue is cheap and frequent.
        return [ScopedRateThrottle()] if self.request.method == "POST" else []

    @extend_schema(
        summary="List jobs",
        description="Students see their own jobs; admins see everyone's.",
        parameters=[
            OpenApiParameter("state", str, enum=JobState.values),
            OpenApiParameter("owner", str, description="Owner's user name."),
            OpenApiParameter("group", str, description="Lab group name."),
            OpenApiParameter("page", int),
        ],
        responses=JobOutput(many=True),
    )
    def get(self, request: Request) -> Response:
        state = request.query_params.get("state")
        if state and state not in JobState.values:
            raise ValidationFailed({"state": [f"Choose one of: {', '.join(JobState.values)}."]})
        jobs = selectors.job_list(
            user=request.user,
            state=state,
            owner=request.query_params.get("owner"),
            group=request.query_params.get("group"),
        )
        paginator = PageNumberPagination()
        page = paginator.paginate_queryset(jobs, request, view=self)
        data = JobOutput(page, many=True).data
        return paginator.get_paginated_response(for_viewer(data, user=request.user))

    @extend_schema(summary="Submit a job", request=JobSubmitInput, responses={201: JobDetailOutput})
    def post(self, request: Request) -> Response:
        serializer = JobSubmitInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = services.job_submit(
            owner=request.user, spec=services.JobSpec(**serializer.validated_data)
        )
        data = for_viewer([JobDetailOutput(job).data], user=request.user)[0]
        return Response(data, status=status.HTTP_201_CREATED)


class JobDetailApi(APIView):
    @extend_schema(summary="One job with its event history", responses=JobDetailOutput)
    def get(self, request: Request, job_id: int) -> Response:
        job = selectors.job_get_for_user(user=request.user, job_id=job_id)
        return Response(for_viewer([JobDetailOutput(job).data], user=request.user)[0])


class JobCancelApi(APIView):
    @extend_schema(summary="Cancel a job", request=None, responses=JobDetailOutput)
    def post(self, request: Request, job_id: int) -> Response:
        job = services.job_cancel(job_id=job_id, by=request.user)
        return Response(for_viewer([JobDetailOutput(job).data], user=request.user)[0])


def for_viewer(jobs: list[dict[str, Any]], *, user: User) -> list[dict[str, Any]]:
    """Serialized jobs with other jobs' ids in reasons and event messages hidden from
    a student who may not see those jobs (`selectors.texts_for_viewer`, one query)."""
    slots: list[tuple[dict[str, Any], str]] = []
    for job in jobs:
        slots.append((job, "reason"))
        slots.extend((event, "message") for event in job.get("events", []))
    texts = selectors.texts_for_viewer([item[key] or "" for item, key in slots], user=user)
    for (item, key), text in zip(slots, texts, strict=True):
        if item[key]:
            item[key] = text
    return jobs
