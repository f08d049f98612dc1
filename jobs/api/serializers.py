"""Input and output shapes of the jobs API. No rules here: `job_submit` owns them."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import serializers

from agents.selectors import job_measured_rates

from ..choices import Consolidation
from ..models import Job, JobEvent


class JobSubmitInput(serializers.Serializer):
    """What a client sends to submit a job. Unknown fields are refused, not ignored:
    a typo such as `gpus` must not silently become the default of 1 GPU."""

    image = serializers.CharField(trim_whitespace=False, help_text="Container image reference.")
    command = serializers.JSONField(help_text='argv list of strings, e.g. ["python", "train.py"].')
    num_gpus = serializers.JSONField(required=False, default=1, help_text="GPUs, 1 or more.")
    name = serializers.CharField(required=False, allow_blank=True, default="")
    env = serializers.JSONField(required=False, default=dict, help_text="{NAME: value} strings.")
    accepted_types = serializers.JSONField(
        required=False,
        default=list,
        help_text=(
            "Device type names the job may run on; [] = any. Best-fit placement tries them in "
            "this order; AlloX (the default) picks the one that serves the job best."
        ),
    )
    consolidation = serializers.ChoiceField(
        choices=Consolidation.choices, required=False, default=Consolidation.PREFERRED
    )
    walltime_seconds = serializers.JSONField(required=False, default=None, allow_null=True)
    max_retries = serializers.JSONField(required=False, default=0)
    group = serializers.CharField(required=False, allow_null=True, default=None)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class JobEventOutput(serializers.ModelSerializer):
    actor_user = serializers.CharField(source="actor_user.username", default=None)

    class Meta:
        model = JobEvent
        fields = ["created_at", "from_state", "to_state", "actor", "actor_user", "message"]


class JobOutput(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    group = serializers.CharField(source="group.name", default=None)
    attained_gpu_hours = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "owner",
            "group",
            "image",
            "command",
            "env",
            "num_gpus",
            "accepted_types",
            "consolidation",
            "walltime_seconds",
            "max_retries",
            "state",
            "reason",
            "queue_position",
            "queue_level",
            "attained_gpu_hours",
            "attempt",
            "retries_used",
            "retry_not_before",
            "preemption_count",
            "exit_code",
            "submitted_at",
            "started_at",
            "finished_at",
        ]

    def get_attained_gpu_hours(self, job: Job) -> float:
        return round(job.attained_service / 3600.0, 3)


class JobDetailOutput(JobOutput):
    events = JobEventOutput(many=True, read_only=True)
    measured_speeds = serializers.SerializerMethodField(
        help_text="Device type -> progress units per second (GPULAB_PROGRESS_FILE), from this "
        "job or earlier runs of the same image, argv and GPU count; {} when nothing was measured."
    )

    class Meta(JobOutput.Meta):
        fields = [*JobOutput.Meta.fields, "measured_speeds", "events"]

    def get_measured_speeds(self, job: Job) -> dict[str, float]:
        rates = job_measured_rates(job_id=job.pk, now=timezone.now())
        return {name: round(rate, 3) for name, rate in sorted(rates.items())}
