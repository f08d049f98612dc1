from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from config.errors import ApplicationError

from .choices import TERMINAL_STATES
from .models import Allocation, Job, JobEvent
from .services import job_cancel


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["created_at", "from_state", "to_state", "actor", "actor_user", "message"]

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False  # the trail is append-only, written by services


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "owner",
        "group",
        "num_gpus",
        "state",
        "queue_level",
        "attempt",
        "submitted_at",
    ]
    list_filter = ["state", "consolidation", "group", "queue_level"]
    search_fields = ["id", "name", "image", "owner__username"]
    date_hierarchy = "submitted_at"
    # State changes go through jobs.services (the state machine), never a raw form edit.
    readonly_fields = [
        "state",
        "attempt",
        "exit_code",
        "submitted_at",
        "started_at",
        "finished_at",
        "attained_service",
        "service_since_promotion",
        "executed_since_promotion",
        "waiting_since_promotion",
        "queue_level",
        "queue_entered_at",
        "preemption_count",
        # What was submitted is validated by jobs.services.job_submit; an edit here would
        # skip it (reserved variables, GPU counts the cluster cannot give).
        "owner",
        "group",
        "name",
        "image",
        "command",
        "env",
        "num_gpus",
        "accepted_types",
        "consolidation",
        "walltime_seconds",
        "max_retries",
    ]
    inlines = [JobEventInline]
    actions = ["cancel"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are submitted through the form or the API

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # Deleting a job that holds GPUs would free them under a running process.
        return obj is None or obj.state in TERMINAL_STATES

    @admin.action(description="Cancel: stop the selected jobs")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        cancelled = 0
        for job in queryset.exclude(state__in=TERMINAL_STATES):
            try:
                job_cancel(job_id=job.pk, by=request.user)  # type: ignore[arg-type]
            except ApplicationError as exc:
                self.message_user(request, f"Job {job.pk}: {exc.message}", messages.WARNING)
            else:
                cancelled += 1
        self.message_user(request, f"Cancelled {cancelled} job(s).")


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ["job", "attempt", "device", "started_at", "ended_at"]
    list_filter = ["ended_at", "device__node"]
    search_fields = ["job__id", "job__name", "device__uuid"]

    # Written by the state machine only: a deleted live allocation frees a busy GPU.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(JobEvent)
class JobEventAdmin(admin.ModelAdmin):
    list_display = ["job", "created_at", "from_state", "to_state", "actor", "actor_user", "message"]
    list_filter = ["actor", "to_state"]
    search_fields = ["job__id", "message"]

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False
