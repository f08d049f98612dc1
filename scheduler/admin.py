from django.contrib import admin
from django.http import HttpRequest

from .models import SchedulerConfig, SchedulingRound
from .settings_services import EDITABLE_FIELDS, scheduler_config_update


@admin.register(SchedulerConfig)
class SchedulerConfigAdmin(admin.ModelAdmin):
    """The live scheduler settings: one row, validated; the next round uses the new values."""

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
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not SchedulerConfig.objects.exists()

    def save_model(self, request, obj, form, change) -> None:  # type: ignore[no-untyped-def]
        # Edits here go through the same audited service as /manage/scheduler/, so the
        # audit log holds every change whichever page made it.
        if not change:
            super().save_model(request, obj, form, change)
            return
        changes = {f: form.cleaned_data[f] for f in form.changed_data if f in EDITABLE_FIELDS}
        scheduler_config_update(actor=request.user, changes=changes)

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
