from django import forms
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


class JobAdminForm(forms.ModelForm):
    """`notify`, the one field an admin edits here: the rest is the state machine's or the
    submission's (JobAdmin.readonly_fields shows them), and a field added to Job later is
    not editable until someone decides it should be."""

    class Meta:
        model = Job
        fields = ["notify"]
        help_texts = {
            "idle_exempt_until": (
                "Set with the job page's Keep (a lab admin's or a coordinator's), which "
                "records who kept it and lifts an idle warning."
            ),
        }


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    form = JobAdminForm
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
    # State changes go through jobs.services (the state machine), never a raw form edit
    # (JobAdminForm edits `notify` only). A value a form held would be the page's, read
    # before the transitions that landed since: saved back, it would undo them.
    readonly_fields = [
        "state",
        "reason",
        "queue_position",
        "retries_used",
        "retry_not_before",
        "pending_since",
        "total_run_seconds",
        "first_started_at",
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
        # Idle reaping's (jobs.idle_services); a keep is the job page's, which writes an event.
        "idle_warned_at",
        "idle_judged_from",
        "idle_exempt_until",
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
        # Checked at submission (the owner's own jobs, no cycles): a form here would list
        # every job of the lab and save any edge, a cycle included.
        "depends_on",
        "dependency",
        "array",
        "array_index",
        # A session's rules are applied at submission (jobs.sessions); its port is the
        # start's; the preemptor is the scheduler's.
        "interactive",
        "session_port",
        "preempted_for",
    ]
    # The session's secret opens its owner's notebook as them: nobody else, an admin
    # neither, reads it (jobs.selectors.sessions_access).
    exclude = ["session_token"]
    inlines = [JobEventInline]
    actions = ["cancel"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are submitted through the form or the API

    def save_model(
        self, request: HttpRequest, obj: Job, form: forms.ModelForm, change: bool
    ) -> None:
        # The fields the admin changed, nothing else: `obj` was read before the POST's
        # checks, and the state machine may have moved the job since (a save of every
        # column once brought a finished job back to RUNNING, holding no GPUs, for ever).
        if form.changed_data:
            obj.save(update_fields=[*form.changed_data, "updated_at"])

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # Deleting a job that holds GPUs would free them under a running process.
        return obj is None or obj.state in TERMINAL_STATES

    def get_deleted_objects(self, objs, request):  # type: ignore[no-untyped-def]
        """The delete pages (one job, or the bulk action) list what must not go as
        protected, which stops the deletion: a job not ended, whose GPUs a process may
        hold; one that jobs not ended wait for, since its edge would go with it and an
        afterok job whose dependency failed would start."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        refused = [f"{job}: {why}" for job in objs if (why := _delete_refusal(job))]
        return deleted, counts, perms_needed, [*protected, *refused]

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


def _delete_refusal(job: Job) -> str:
    if job.state not in TERMINAL_STATES:
        return "not ended; cancel it first"
    waiting = list(
        job.dependents.exclude(state__in=TERMINAL_STATES).values_list("pk", flat=True)[:10]
    )
    if waiting:
        return f"job(s) {', '.join(f'#{pk}' for pk in waiting)} wait for it; cancel them first"
    return ""


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
