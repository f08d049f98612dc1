from django.contrib import admin, messages
from django.db import connection
from django.http import HttpRequest

from config.forms import ConcurrentEditForm

from .models import SchedulerConfig, SchedulingRound
from .selectors import scheduler_config_locked
from .settings_services import EDITABLE_FIELDS, scheduler_config_update


@admin.register(SchedulerConfig)
class SchedulerConfigAdmin(admin.ModelAdmin):
    """The live scheduler settings: one row, validated; the next round uses the new values.

    Two admins may edit at once: the form remembers what it showed (`ConcurrentEditForm`),
    saves only what this admin changed, and refuses a field someone else changed meanwhile.
    """

    form = ConcurrentEditForm

    list_display = [
        "__str__",
        "queue_thresholds",
        "promote_knob",
        "fairness",
        "round_interval_seconds",
        "updated_at",
    ]
    fieldsets = [
        ("Policy", {"fields": ["policy", "placement"]}),
        (
            "Tiresias",
            {
                "fields": [
                    "queue_thresholds",
                    "promote_knob",
                    "min_runtime_seconds",
                    "restore_cost_seconds",
                ]
            },
        ),
        (
            "Churn control",
            {
                "fields": [
                    "preempt_patience_seconds",
                    "preempt_margin",
                    "max_victims",
                    "starvation_seconds",
                ]
            },
        ),
        (
            "Fairness and AlloX",
            {"fields": ["fairness", "allox_alpha", "allox_window", "allox_efficiency_gate"]},
        ),
        ("Loop", {"fields": ["round_interval_seconds", "preemption_grace_seconds"]}),
        (
            "Idle reaping",
            {
                "fields": [
                    "idle_reap",
                    "idle_threshold_pct",
                    "idle_window_minutes",
                    "idle_grace_minutes",
                    "session_idle_minutes",
                ]
            },
        ),
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not SchedulerConfig.objects.exists()

    def get_object(self, request, object_id, from_field=None):  # type: ignore[no-untyped-def]
        # A save locks the row (the change view runs in one transaction) from the form's
        # conflict check, against the row read here, to the write: another admin's save
        # lands wholly before (and is seen) or after it.
        config = super().get_object(request, object_id, from_field)
        if config is not None and request.method == "POST" and connection.in_atomic_block:
            config = scheduler_config_locked()
        return config

    def save_model(self, request, obj, form, change) -> None:  # type: ignore[no-untyped-def]
        # Edits here go through the same audited service as /manage/scheduler/, so the
        # audit log holds every change whichever page made it.
        if not change:
            super().save_model(request, obj, form, change)
            return
        changes = {
            field: form.cleaned_data[field]
            for field in form.edited_fields()
            if field in EDITABLE_FIELDS
        }
        scheduler_config_update(actor=request.user, changes=changes)
        for warning in SchedulerConfig.objects.get(pk=obj.pk).clean_warnings():
            messages.warning(request, warning)

    def has_delete_permission(
        self, request: HttpRequest, obj: SchedulerConfig | None = None
    ) -> bool:
        return False


@admin.register(SchedulingRound)
class SchedulingRoundAdmin(admin.ModelAdmin):
    list_display = [
        "started_at",
        "trigger",
        "outcome",
        "policy",
        "pending_jobs",
        "running_jobs",
        "starts",
        "preemptions",
        "holds",
        "duration_ms",
    ]
    list_filter = ["outcome", "trigger", "policy"]
    date_hierarchy = "started_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: SchedulingRound | None = None
    ) -> bool:
        return False
