"""The heartbeat's shape, validated field by field (what `NvmlCollector.collect` sends)."""

from __future__ import annotations

import math

from rest_framework import serializers

from ..models import PG_INT_MAX

MAX_GPUS = 64
MAX_PROCESSES = 256


class ProcessInput(serializers.Serializer):
    pid = serializers.IntegerField(min_value=0, max_value=PG_INT_MAX)
    used_memory_mb = serializers.IntegerField(min_value=0, max_value=PG_INT_MAX)
    job_id = serializers.IntegerField(
        min_value=1, max_value=PG_INT_MAX, allow_null=True, required=False, default=None
    )
    attempt = serializers.IntegerField(
        min_value=1, max_value=PG_INT_MAX, allow_null=True, required=False, default=None
    )


GPU_UUID = r"^[A-Za-z0-9-]{1,64}$"


class GpuInput(serializers.Serializer):
    index = serializers.IntegerField(min_value=0, max_value=MAX_GPUS - 1)
    uuid = serializers.RegexField(GPU_UUID)
    name = serializers.CharField(max_length=128)
    lost = serializers.BooleanField(
        default=False, help_text="NVML can no longer reach it: its readings are empty."
    )
    memory_total_mb = serializers.IntegerField(min_value=0, max_value=PG_INT_MAX)
    memory_used_mb = serializers.IntegerField(min_value=0, max_value=PG_INT_MAX)
    utilization_pct = serializers.IntegerField(min_value=0, max_value=100, allow_null=True)
    temperature_c = serializers.IntegerField(min_value=-50, max_value=200, allow_null=True)
    power_w = serializers.FloatField(min_value=0, max_value=5000, allow_null=True)
    ecc_uncorrected = serializers.IntegerField(min_value=0, max_value=PG_INT_MAX, allow_null=True)
    xid_errors = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=PG_INT_MAX),
        max_length=1000,
        default=list,
    )
    processes = serializers.ListField(child=ProcessInput(), max_length=MAX_PROCESSES)


class JobProgressInput(serializers.Serializer):
    """A job's own count of work done (`$GPULAB_PROGRESS_FILE`), read by the agent."""

    job_id = serializers.IntegerField(min_value=1, max_value=PG_INT_MAX)
    attempt = serializers.IntegerField(min_value=1, max_value=PG_INT_MAX)
    # The GPU the reading was taken through (one of the attempt's processes runs on it).
    # Readings without it (agents before version 2) are ignored, not refused.
    gpu_uuid = serializers.RegexField(GPU_UUID, required=False, allow_null=True, default=None)
    progress = serializers.FloatField(min_value=0, max_value=1e18)

    def validate_progress(self, value: float) -> float:
        if not math.isfinite(value):
            raise serializers.ValidationError("Must be a finite number.")
        return value


class HeartbeatInput(serializers.Serializer):
    hostname = serializers.CharField(max_length=255, required=False, default="")
    agent_version = serializers.CharField(max_length=32, required=False, default="")
    driver_version = serializers.CharField(max_length=64, allow_blank=True)
    cuda_version = serializers.CharField(max_length=32, allow_blank=True)
    gpus = serializers.ListField(child=GpuInput(), max_length=MAX_GPUS)
    jobs = serializers.ListField(
        child=JobProgressInput(), max_length=MAX_PROCESSES, required=False, default=list
    )

    def validate_gpus(self, gpus: list[dict]) -> list[dict]:
        uuids = [gpu["uuid"] for gpu in gpus]
        indexes = [gpu["index"] for gpu in gpus]
        if len(set(uuids)) != len(uuids) or len(set(indexes)) != len(indexes):
            raise serializers.ValidationError("Each GPU UUID and index may appear once.")
        return gpus
