"""Jobs REST API: each view is validate → service/selector → serialize."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import User
from config.api_errors import BAD_BODY, FIELD_ERRORS, NOT_AUTHENTICATED, NOT_JSON, error_response
from config.api_params import page_get, page_number_parse, query_list, query_params_check
from config.errors import ValidationFailed
from config.throttling import FailOpenScopedRateThrottle
from jobs.selectors import jobs_live_service

from .. import selectors, services
from ..choices import JobState
from ..models import Job
from .serializers import ArrayCancelOutput, JobDetailOutput, JobOutput, JobSubmitInput

LIST_PARAMETERS = ("state", "owner", "group", "array", "page")
REPEATABLE_PARAMETERS = ("state",)


class JobPagination(PageNumberPagination):
    """DRF's page-number envelope (`count`, `next`, `previous`, `results`), with a bad
    `page` a 400 naming it, as on /api/v1/queue/, not DRF's 404 "Invalid page."."""

    def paginate_queryset(self, queryset, request, view=None):  # type: ignore[no-untyped-def]
        number = page_number_parse(request.query_params.get(self.page_query_param))
        self.page = page_get(self.django_paginator_class(queryset, self.page_size), number)
        self.request = request
        return list(self.page)


class JobListCreateApi(APIView):
    throttle_scope = "job_submit"
    pagination_class = JobPagination  # also what the schema's list envelope is built from

    def get_throttles(self):  # type: ignore[no-untyped-def]
        # Only submissions are rate-limited; reading the queue is cheap and frequent.
        return [FailOpenScopedRateThrottle()] if self.request.method == "POST" else []

    @extend_schema(
        summary="List jobs",
        description=(
            "Students see their own jobs, a group's coordinators the group's too, and admins "
            "everyone's. Newest first, 50 a page. "
            "An unknown query parameter, or one other than `state` given twice, is a 400 "
            "naming it."
        ),
        parameters=[
            OpenApiParameter(
                "state",
                {"type": "array", "items": {"type": "string", "enum": JobState.values}},
                description="Only jobs in these states: repeated (state=PENDING&state=RUNNING) "
                "or comma-separated (state=PENDING,RUNNING).",
                style="form",
                explode=True,
            ),
            OpenApiParameter("owner", str, description="Owner's user name."),
            OpenApiParameter("group", str, description="Lab group name."),
            OpenApiParameter(
                "array", int, description="Only this array's tasks, by index (not newest first)."
            ),
        ],
        responses={200: JobOutput(many=True), 400: FIELD_ERRORS, 401: NOT_AUTHENTICATED},
    )
    def get(self, request: Request) -> Response:
        query_params_check(request, allowed=LIST_PARAMETERS, repeatable=REPEATABLE_PARAMETERS)
        states = query_list(request, "state")
        unknown = [state for state in states if state not in JobState.values]
        if unknown:
            choices = ", ".join(JobState.values)
            raise ValidationFailed(
                {
                    "state": [
                        f"Unknown state {state!r}; choose from: {choices}." for state in unknown
                    ]
                }
            )
        array = request.query_params.get("array")
        if array is not None and not (array.isascii() and array.isdigit() and len(array) < 19):
            raise ValidationFailed({"array": ["An array id, a whole number."]})
        jobs = selectors.job_list(
            user=request.user,
            states=states,
            owner=request.query_params.get("owner"),
            group=request.query_params.get("group"),
            array=int(array) if array is not None else None,
        ).prefetch_related("depends_on")  # the ids each waits for, one query for a page
        paginator = self.pagination_class()
        page = paginator.paginate_queryset(jobs, request, view=self)
        data = jobs_data(page, user=request.user, many=True)
        return paginator.get_paginated_response(data)

    @extend_schema(
        summary="Submit a job",
        request=JobSubmitInput,
        responses={
            201: JobDetailOutput,
            400: BAD_BODY,
            401: NOT_AUTHENTICATED,
            415: NOT_JSON,
            429: error_response(
                "Too many submissions a minute (`throttled`). A full pending-jobs quota is "
                "a 400 naming `quota`."
            ),
        },
    )
    def post(self, request: Request) -> Response:
        query_params_check(request, allowed=[])
        serializer = JobSubmitInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = services.job_submit(
            owner=request.user, spec=services.JobSpec(**serializer.validated_data)
        )
        return Response(jobs_data([job], user=request.user)[0], status=status.HTTP_201_CREATED)


class JobDetailApi(APIView):
    @extend_schema(
        summary="One job with its event history",
        responses={
            200: JobDetailOutput,
            400: FIELD_ERRORS,
            401: NOT_AUTHENTICATED,
            404: error_response("No such job of yours."),
        },
    )
    def get(self, request: Request, job_id: int) -> Response:
        query_params_check(request, allowed=[])
        job = selectors.job_get_for_user(user=request.user, job_id=job_id)
        return Response(jobs_data([job], user=request.user)[0])


class JobCancelApi(APIView):
    @extend_schema(
        summary="Cancel a job",
        request=None,
        responses={
            200: JobDetailOutput,
            400: FIELD_ERRORS,
            401: NOT_AUTHENTICATED,
            404: error_response("No such job of yours."),
            409: error_response("The job already ended (`illegal_transition`)."),
        },
    )
    def post(self, request: Request, job_id: int) -> Response:
        query_params_check(request, allowed=[])
        job = services.job_cancel(job_id=job_id, by=request.user)
        return Response(jobs_data([job], user=request.user)[0])


def jobs_data(jobs: Sequence[Job], *, user: User, many: bool = False) -> list[dict[str, Any]]:
    """Jobs serialized for `user`: the list shape (`many`) or the detail shape, with the
    current run's service in attained_gpu_hours and other jobs' ids hidden (`for_viewer`)."""
    live = jobs_live_service(job_ids=[job.pk for job in jobs], now=timezone.now())
    serializer = JobOutput if many else JobDetailOutput
    sessions = selectors.sessions_access(jobs=jobs, viewer=user)
    data = serializer(jobs, many=True, context={"live_service": live, "sessions": sessions}).data
    return for_viewer(list(data), user=user)


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
    # A job's dependencies are its owner's jobs, but an admin's may name anyone's and the
    # admin may since have become a student: ids the viewer may not see read null.
    needed = {pk for job in jobs for pk in job.get("depends_on", [])}
    if needed and not user.is_lab_admin:
        visible = set(selectors.jobs_visible_by_id(user=user, job_ids=needed))
        for job in jobs:
            job["depends_on"] = [pk if pk in visible else None for pk in job["depends_on"]]
    return jobs


class ArrayCancelApi(APIView):
    @extend_schema(
        summary="Cancel a job array",
        description="Every task of the array that has not ended, in one transaction "
        "(Slurm's `scancel ARRAY`). Tasks that ended already are left as they are.",
        request=None,
        responses={
            200: ArrayCancelOutput,
            400: FIELD_ERRORS,
            401: NOT_AUTHENTICATED,
            404: error_response("No such array of yours."),
        },
    )
    def post(self, request: Request, array_id: int) -> Response:
        query_params_check(request, allowed=[])
        cancelled = services.job_array_cancel(array_id=array_id, by=request.user)
        return Response({"array": array_id, "cancelled": cancelled})
