"""GET /api/v1/queue/: the queue page's data (pending in order, running, the caller's jobs)."""

from __future__ import annotations

import dataclasses

from django.core.paginator import Paginator
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api_errors import FIELD_ERRORS, NOT_AUTHENTICATED
from config.api_params import page_get, page_number_parse, query_params_check

from ..selectors import queue as queue_selectors

PAGE_SIZE = 50


class QueueEntryOutput(serializers.Serializer):
    job_id = serializers.IntegerField(
        allow_null=True,
        help_text="Null for a job the caller may not see (students see their own, "
        "coordinators their groups' too).",
    )
    name = serializers.CharField(help_text="Empty for another user's job.")
    owner = serializers.CharField(help_text="Empty for another user's job.")
    group = serializers.CharField()
    mine = serializers.BooleanField()
    state = serializers.CharField()
    num_gpus = serializers.IntegerField()
    accepted_types = serializers.ListField(child=serializers.CharField())
    queue_level = serializers.IntegerField()
    queue_position = serializers.IntegerField(allow_null=True)
    attained_gpu_hours = serializers.FloatField(
        help_text="Attained service in normalized GPU-hours: hours held x GPUs x device speed "
        "(the Tiresias queues' measure, not plain GPU-hours); up to now for running jobs."
    )
    waiting_seconds = serializers.FloatField(
        help_text="Pending: since it last became pending. Running: since it started."
    )
    reason = serializers.CharField(
        help_text="The scheduler's reason code and detail; for a job the caller may not see "
        "in full, a quota hold is its code alone (another person's cap is not told)."
    )
    reason_words = serializers.CharField()
    jobs_ahead = serializers.IntegerField()
    gpus_ahead = serializers.IntegerField()
    estimated_start = serializers.DateTimeField(
        allow_null=True,
        help_text="Pending jobs: when the start forecast expects it to start; null without one "
        "(the job's own `estimated_start` says why).",
    )


class QueueOutput(serializers.Serializer):
    pending_total = serializers.IntegerField()
    pending_gpus = serializers.IntegerField()
    page = serializers.IntegerField()
    num_pages = serializers.IntegerField()
    pending = QueueEntryOutput(many=True)
    running = QueueEntryOutput(many=True)
    mine = QueueEntryOutput(many=True, help_text="The caller's pending jobs.")


class QueueApi(APIView):
    @extend_schema(
        summary="The queue in the scheduler's order, with reasons and what is ahead",
        description=(
            "Pending jobs (50 per page) in the order of the last scheduling round, every "
            "running job, and the caller's own pending jobs. Students see other users' "
            "entries without owner, name or id, except a coordinator those of their groups."
        ),
        parameters=[OpenApiParameter("page", int, description="Page of the pending list.")],
        responses={200: QueueOutput, 400: FIELD_ERRORS, 401: NOT_AUTHENTICATED},
    )
    def get(self, request: Request) -> Response:
        query_params_check(request, allowed=["page"])
        number = page_number_parse(request.query_params.get("page"))
        order = queue_selectors.pending_order()
        page = page_get(Paginator(order, PAGE_SIZE), number)
        view = queue_selectors.queue_view(
            viewer=request.user, order=order, page_rows=page.object_list
        )
        data = {
            "pending_total": view.pending_total,
            "pending_gpus": view.pending_gpus,
            "page": page.number,
            "num_pages": page.paginator.num_pages,
            "pending": [dataclasses.asdict(entry) for entry in view.pending],
            "running": [dataclasses.asdict(entry) for entry in view.running],
            "mine": [dataclasses.asdict(entry) for entry in view.mine],
        }
        return Response(QueueOutput(data).data)
