"""Input and output shapes of the jobs API. No rules here: `job_submit` owns them."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents.selectors import job_measured_rates
from jobs.selectors import job_run_seconds, jobs_live_service
from scheduler.selectors import start_forecast_of

from .. import validation
from ..choices import Consolidation, DependencyKind, Notify
from ..models import Job, JobEvent


class StrictCharField(serializers.CharField):
    """A string, and only a string: DRF's CharField stores `5` as "5" and `true` as "True"."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


# The fields below are passed through as JSON rather than converted here, so that `1.5`
# GPUs or `"2"` are refused by `job_submit` with the field named (a DRF IntegerField would
# quietly take "2"), and the form, the API and the CLI share one set of rules. Each is
# documented with the type `job_submit` accepts.
_STRINGS = {"type": "array", "items": {"type": "string"}}


@extend_schema_field({"type": "string", "minLength": 1, "maxLength": validation.MAX_IMAGE_LENGTH})
class ImageField(StrictCharField):
    pass


@extend_schema_field({"type": "string", "maxLength": validation.MAX_NAME_LENGTH})
class NameField(StrictCharField):
    pass


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "maxLength": validation.MAX_ARG_LENGTH},
        "minItems": 1,
        "maxItems": validation.MAX_ARGS,
    }
)
class CommandField(serializers.JSONField):
    pass


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": validation.MAX_GPUS_PER_JOB})
class GpuCountField(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": validation.MAX_ENV_VARS,
        "additionalProperties": {"type": "string", "maxLength": validation.MAX_ENV_VALUE_LENGTH},
    }
)
class EnvField(serializers.JSONField):
    pass


@extend_schema_field(_STRINGS)
class TypeNamesField(serializers.JSONField):
    pass


@extend_schema_field({"type": "integer", "minimum": 60, "maximum": validation.MAX_WALLTIME_SECONDS})
class WalltimeField(serializers.JSONField):
    pass


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": validation.MAX_RETRIES})
class RetriesField(serializers.JSONField):
    pass


# An array's size and its cap on running tasks: both 1 to MAX_ARRAY_SIZE.
@extend_schema_field({"type": "integer", "minimum": 1, "maximum": validation.MAX_ARRAY_SIZE})
class ArrayCountField(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "integer", "minimum": 1},
        "maxItems": validation.MAX_DEPENDENCIES,
        "uniqueItems": True,
    }
)
class JobIdsField(serializers.JSONField):
    pass


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only, as every other field takes its JSON type only: "yes" or 1
    for a session is a typo to report, not a guess to make."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class JobSubmitInput(serializers.Serializer):
    """What a client sends to submit a job. Unknown fields are refused, not ignored:
    a typo such as `gpus` must not silently become the default of 1 GPU."""

    image = ImageField(trim_whitespace=False, help_text="Container image reference.")
    command = CommandField(help_text='argv list of strings, e.g. ["python", "train.py"].')
    num_gpus = GpuCountField(
        required=False,
        default=1,
        help_text="GPUs, 1 or more, at most what the cluster could ever give one job.",
    )
    name = NameField(required=False, allow_blank=True, default="")
    env = EnvField(required=False, default=dict, help_text="{NAME: value} strings.")
    accepted_types = TypeNamesField(
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
    walltime_seconds = WalltimeField(
        required=False,
        default=None,
        allow_null=True,
        help_text="Fail the job once it has held GPUs this long, all attempts together.",
    )
    max_retries = RetriesField(
        required=False, default=0, help_text="Retries after a non-zero exit, 0 to 10."
    )
    group = StrictCharField(
        required=False,
        allow_null=True,
        default=None,
        help_text="One of your groups; default: your default group.",
    )
    depends_on = JobIdsField(
        required=False,
        default=list,
        help_text="Ids of jobs of yours this one waits for (Slurm's --dependency); [] = none.",
    )
    dependency = serializers.ChoiceField(
        choices=DependencyKind.choices,
        required=False,
        default=DependencyKind.AFTER_OK,
        help_text="afterok: start once they all succeeded (one that fails or is cancelled "
        "holds this job for good: DependencyNeverSatisfied); afterany: once they all ended.",
    )

    notify = serializers.ChoiceField(
        choices=Notify.choices,
        required=False,
        allow_blank=True,
        default="",
        help_text="Email the owner (their account's address): end, fail (only if it fails), "
        "all (when it starts and when it ends), or empty for never (Slurm's --mail-type).",
    )
    array_size = ArrayCountField(
        required=False,
        default=None,
        allow_null=True,
        help_text="Submit this many tasks of the job (Slurm's --array): task i runs with "
        "GPULAB_ARRAY_INDEX=i (and GPULAB_ARRAY_ID, GPULAB_ARRAY_SIZE). The answer is task 0.",
    )
    array_max_running = ArrayCountField(
        required=False,
        default=None,
        allow_null=True,
        help_text="At most this many of the array's tasks hold GPUs at once (Slurm's %N).",
    )

    interactive = StrictBooleanField(
        required=False,
        default=False,
        help_text="An interactive session (Jupyter, a shell): not preempted (but for another "
        "group's guarantee, when it runs beyond its own group's), at most "
        "GPULAB_SESSION_MAX_HOURS of walltime (GPULAB_SESSION_DEFAULT_HOURS when none is "
        "given), never retried, on one node, and given a port and a token in its environment "
        "(GPULAB_SESSION_PORT/_TOKEN, JUPYTER_PORT/_TOKEN); `session` in the answer says where "
        "to connect.",
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class JobSubmitInputSchema(OpenApiSerializerExtension):
    """The schema of `JobSubmitInput` says what its `to_internal_value` does: a property
    it does not list is refused (drf-spectacular registers this on import)."""

    target_class = JobSubmitInput

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {**super().map_serializer(auto_schema, direction), "additionalProperties": False}


class JobEventOutput(serializers.ModelSerializer):
    actor_user = serializers.CharField(
        source="actor_user.username",
        default=None,
        allow_null=True,
        help_text="Who did it; null for the scheduler, an agent or the system.",
    )

    class Meta:
        model = JobEvent
        fields = ["created_at", "from_state", "to_state", "actor", "actor_user", "message"]


class JobOutput(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    group = serializers.CharField(source="group.name", default=None, allow_null=True)
    attained_gpu_hours = serializers.SerializerMethodField(
        help_text="Normalized by device speed; while it holds GPUs, up to now."
    )
    depends_on = serializers.SerializerMethodField(
        help_text="Ids of the jobs this one waits for; null for one the caller may not see."
    )
    run_seconds = serializers.SerializerMethodField(
        help_text="Seconds it has held GPUs, all attempts together: what walltime_seconds limits."
    )
    array = serializers.SerializerMethodField(
        help_text="The array this job is a task of, or null: {id, index, size, max_running}."
    )
    estimated_start = serializers.SerializerMethodField(
        help_text="Pending jobs: when the scheduler, replayed forward, starts it (`at`, null "
        "with a `note` where there is no estimate), and the range past forecasts' real starts "
        "fell in for 80 % of them (`earliest`/`latest`, null until measured). Null otherwise."
    )

    session = serializers.SerializerMethodField(
        help_text="A running session's address: {node, port, url, tunnel, token}; `token` only for "
        "its owner, `tunnel` the ssh command when the lab has a gateway. Null otherwise."
    )

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
            "run_seconds",
            "max_retries",
            "depends_on",
            "dependency",
            "array",
            "notify",
            "state",
            "reason",
            "queue_position",
            "estimated_start",
            "interactive",
            "session",
            "idle_warned_at",
            "idle_exempt_until",
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

    def get_run_seconds(self, job: Job) -> float:
        seconds = job_run_seconds(
            state=job.state,
            total_run_seconds=job.total_run_seconds,
            started_at=job.started_at,
            now=timezone.now(),
        )
        return round(seconds, 1)

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "at": {"type": "string", "format": "date-time", "nullable": True},
                "earliest": {"type": "string", "format": "date-time", "nullable": True},
                "latest": {"type": "string", "format": "date-time", "nullable": True},
                "made_at": {"type": "string", "format": "date-time"},
                "note": {"type": "string"},
            },
        }
    )
    def get_estimated_start(self, job: Job) -> dict[str, Any] | None:
        forecast = start_forecast_of(job)  # read with the job (jobs.selectors.job_visible_to)
        if forecast is None:
            return None
        moment = serializers.DateTimeField().to_representation
        return {
            "at": forecast.start_at and moment(forecast.start_at),
            "earliest": forecast.earliest_at and moment(forecast.earliest_at),
            "latest": forecast.latest_at and moment(forecast.latest_at),
            "made_at": moment(forecast.made_at),
            "note": forecast.note,
        }

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "node": {"type": "string"},
                "port": {"type": "integer"},
                "url": {"type": "string"},
                "tunnel": {"type": "string"},
                "token": {"type": "string", "nullable": True},
            },
        }
    )
    def get_session(self, job: Job) -> dict[str, Any] | None:
        access = self.context.get("sessions", {}).get(job.pk)
        if access is None:
            return None
        return {
            "node": access.node,
            "port": access.port,
            "url": access.url,
            "tunnel": access.tunnel,
            "token": access.token,
        }

    @extend_schema_field({"type": "array", "items": {"type": "integer", "nullable": True}})
    def get_depends_on(self, job: Job) -> list[int]:
        # `.all()`: the list prefetches them for a whole page (jobs.api.views).
        return sorted(needed.pk for needed in job.depends_on.all())

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "id": {"type": "integer"},
                "index": {"type": "integer"},
                "size": {"type": "integer"},
                "max_running": {"type": "integer", "nullable": True},
            },
        }
    )
    def get_array(self, job: Job) -> dict[str, Any] | None:
        if job.array_id is None:
            return None
        return {
            "id": job.array_id,
            "index": job.array_index,
            "size": job.array.size,
            "max_running": job.array.max_running,
        }

    def get_attained_gpu_hours(self, job: Job) -> float:
        # The stored service is folded in at transitions; a running job's current run is
        # not in it yet. Views pass it for a whole page in `live_service`.
        live = self.context.get("live_service")
        if live is None:
            live = jobs_live_service(job_ids=[job.pk], now=timezone.now())
        return round((job.attained_service + live.get(job.pk, 0.0)) / 3600.0, 3)


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


class ArrayCancelOutput(serializers.Serializer):
    array = serializers.IntegerField()
    cancelled = serializers.ListField(
        child=serializers.IntegerField(), help_text="The tasks cancelled, last index first."
    )
