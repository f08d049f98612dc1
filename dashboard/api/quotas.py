"""GET /api/v1/quotas/: the caller's quotas (own account and lab groups), used against limit."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api_errors import FIELD_ERRORS, NOT_AUTHENTICATED
from config.api_params import query_params_check

from ..selectors.quotas import quota_status


class DeviceTypeQuotaOutput(serializers.Serializer):
    device_type = serializers.CharField()
    gpus_in_use = serializers.IntegerField(help_text="GPUs of this type the account holds now.")
    max_gpus = serializers.IntegerField(help_text="The account's cap on GPUs of this type.")
    at_limit = serializers.BooleanField(help_text="In use reached (or passed) the cap.")


class QuotaAccountOutput(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=[("user", "User"), ("group", "Group")],
        help_text="The caller's own account, or one of the caller's lab groups.",
    )
    name = serializers.CharField(help_text="User name or group name.")
    weight = serializers.FloatField(help_text="Fair-share weight.")
    gpus_in_use = serializers.IntegerField(
        help_text="GPUs of starting, running and preempting jobs: for a user, their own jobs "
        "in any group; for a group, every job charged to it, whoever submitted it."
    )
    max_gpus = serializers.IntegerField(allow_null=True, help_text="Null: no limit.")
    guaranteed_gpus = serializers.IntegerField(
        allow_null=True,
        help_text="GPUs the group always gets back, by preempting borrowed ones; null for "
        "users and for groups without a guarantee.",
    )
    borrowed_gpus = serializers.IntegerField(
        allow_null=True,
        help_text="GPUs in use beyond the guarantee (reclaimable); null where guaranteed_gpus is.",
    )
    running_jobs = serializers.IntegerField(help_text="Starting, running and preempting jobs.")
    max_running_jobs = serializers.IntegerField(allow_null=True, help_text="Null: no limit.")
    pending_jobs = serializers.IntegerField()
    max_pending_jobs = serializers.IntegerField(allow_null=True, help_text="Null: no limit.")
    device_types = DeviceTypeQuotaOutput(
        many=True, help_text="One row per GPU type the account has a cap on."
    )
    at_limit = serializers.ListField(
        child=serializers.CharField(),
        help_text="The limits reached or passed: max_gpus, max_running_jobs, "
        "max_pending_jobs, max_gpus[<type>]. Empty: room on every limit.",
    )


class QuotasOutput(serializers.Serializer):
    accounts = QuotaAccountOutput(
        many=True, help_text="The caller's own account first, then their groups by name."
    )


class QuotasApi(APIView):
    @extend_schema(
        summary="Your quotas: GPUs and jobs in use against each limit",
        description=(
            "The caller's own account and each lab group they belong to (admins too see "
            "only their own): GPUs and jobs in use, pending jobs, per-type caps, and for "
            "groups with a guarantee the GPUs guaranteed and borrowed. As Slurm's `sshare` "
            "or Kueue's ClusterQueue status."
        ),
        responses={200: QuotasOutput, 400: FIELD_ERRORS, 401: NOT_AUTHENTICATED},
    )
    def get(self, request: Request) -> Response:
        query_params_check(request, allowed=[])
        return Response(QuotasOutput({"accounts": quota_status(user=request.user)}).data)
