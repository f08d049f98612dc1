from django.contrib import admin

from .models import Allocation, Job, JobEvent


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
    ]
    inlines = [JobEventInline]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ["job", "attempt", "device", "started_at", "ended_at"]
    list_filter = ["ended_at", "device__node"]
    search_fields = ["job__id", "job__name", "device__uuid"]

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
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
