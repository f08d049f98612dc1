"""GET /api/v1/cluster/: nodes and their devices, who holds each, and the latest readings."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from cluster.choices import NodeState, Runtime
from config.api_errors import FIELD_ERRORS, NOT_AUTHENTICATED
from config.api_params import query_params_check

from ..selectors.cluster import cluster_overview


class DeviceOutput(serializers.Serializer):
    id = serializers.IntegerField()
    index = serializers.IntegerField(help_text="Index on the node (nvidia-smi order).")
    kind = serializers.CharField()
    device_type = serializers.CharField()
    model_name = serializers.CharField()
    allocated = serializers.BooleanField(help_text="Held by a starting, running or stopping job.")
    stopping = serializers.BooleanField(
        help_text=(
            "Let go of by a cancelled or timed-out job whose process the node has not yet "
            "been seen to stop; nothing new starts on it until then."
        )
    )
    cordoned = serializers.BooleanField(
        help_text="Taken out of service by an admin: nothing new starts here; a job running "
        "here finishes."
    )
    cordon_reason = serializers.CharField(help_text="Who cordoned it and why; empty if not.")
    mine = serializers.BooleanField(help_text="Held by one of the caller's jobs.")
    job_id = serializers.IntegerField(
        allow_null=True,
        help_text="The holding job; null when free, or (students) when it is not theirs.",
    )
    job_owner = serializers.CharField(
        allow_null=True, help_text="The holding job's owner; null where job_id is."
    )
    reading_at = serializers.DateTimeField(
        allow_null=True, help_text="The newest reading of the last 2 minutes; null: none."
    )
    utilization_pct = serializers.IntegerField(allow_null=True)
    memory_used_mb = serializers.IntegerField(allow_null=True)
    memory_total_mb = serializers.IntegerField(allow_null=True)
    temperature_c = serializers.IntegerField(allow_null=True)
    health = serializers.ListField(
        child=serializers.CharField(),
        help_text="Xid errors and uncorrected ECC errors of the last hour; empty: healthy.",
    )


class NodeOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=NodeState.choices)
    state_reason = serializers.CharField()
    runtime = serializers.ChoiceField(choices=Runtime.choices)
    simulated = serializers.BooleanField()
    last_heartbeat_at = serializers.DateTimeField(allow_null=True)
    heartbeat_age_seconds = serializers.FloatField(allow_null=True)
    devices = DeviceOutput(many=True)


class CountsOutput(serializers.Serializer):
    total = serializers.IntegerField(help_text="GPUs in all; the five parts below add up to it.")
    allocated = serializers.IntegerField(help_text="Held by a job.")
    stopping = serializers.IntegerField(
        help_text="Not held, but an ended job's process on it is still being stopped."
    )
    free = serializers.IntegerField(help_text="Not held, on an up node.")
    out_of_service = serializers.IntegerField(
        help_text="Not held: cordoned, or on a down or drained node."
    )
    held_back = serializers.IntegerField(help_text="Not held, on a suspect or draining node.")


class ClusterOutput(serializers.Serializer):
    as_of = serializers.DateTimeField()
    counts = CountsOutput()
    nodes = NodeOutput(many=True)


class ClusterApi(APIView):
    @extend_schema(
        summary="Nodes, devices, allocations and the latest GPU readings",
        description=(
            "Every node with its state and last heartbeat, and every device with the job "
            "holding it and its newest reading. Admins see every holding job and owner; "
            "students see the job id only on devices their own jobs hold, or (coordinators) "
            "jobs of the groups they coordinate."
        ),
        responses={200: ClusterOutput, 400: FIELD_ERRORS, 401: NOT_AUTHENTICATED},
    )
    def get(self, request: Request) -> Response:
        query_params_check(request, allowed=[])
        return Response(ClusterOutput(cluster_overview(viewer=request.user)).data)
