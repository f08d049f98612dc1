from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import ApiToken, AuditEntry, DeviceTypeQuota, LabGroup, User
from .services import api_token_revoke


class DeviceTypeQuotaInline(admin.TabularInline):
    """Shown, not edited: per-type caps change on the audited quota editor too."""

    model = DeviceTypeQuota
    extra = 0
    fk_name = "user"
    readonly_fields = ["device_type", "max_gpus"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class GroupDeviceTypeQuotaInline(DeviceTypeQuotaInline):
    fk_name = "group"


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    list_display = [
        "username",
        "role",
        "default_group",
        "weight",
        "max_gpus",
        "max_running_jobs",
        "max_pending_jobs",
        "is_active",
    ]
    list_filter = ["role", "is_active", "lab_groups"]
    search_fields = ["username", "email", "first_name", "last_name"]
    fieldsets = [
        *DjangoUserAdmin.fieldsets,
        (
            "gpulab",
            {
                "fields": [
                    "role",
                    "default_group",
                    "weight",
                    "max_gpus",
                    "max_running_jobs",
                    "max_pending_jobs",
                ]
            },
        ),
    ]
    inlines = [DeviceTypeQuotaInline]
    # Weights and limits change only on the audited quota editor (/manage/quotas/).
    readonly_fields = ["weight", "max_gpus", "max_running_jobs", "max_pending_jobs"]


@admin.register(LabGroup)
class LabGroupAdmin(admin.ModelAdmin):
    list_display = ["name", "weight", "max_gpus", "max_running_jobs", "max_pending_jobs"]
    search_fields = ["name", "description"]
    filter_horizontal = ["members"]
    inlines = [GroupDeviceTypeQuotaInline]
    # Weights and limits change only on the audited quota editor (/manage/quotas/).
    readonly_fields = ["weight", "max_gpus", "max_running_jobs", "max_pending_jobs"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made by their owners (/account/tokens/), where the key is shown once;
    here an admin looks and revokes. Adding one here stored a token without a key, and
    moving one to another user or clearing its revocation left no trace."""

    list_display = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "name", "prefix"]
    readonly_fields = ["user", "digest", "prefix", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke: the token stops working at once")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset.select_related("user"):
            api_token_revoke(user=token.user, token_id=token.pk)
        self.message_user(request, f"Revoked {queryset.count()} token(s).")


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Read-only: the log is written by the services only, so it can be trusted."""

    list_display = [
        "at", "actor_username", "target_kind", "target_name", "field", "old_value", "new_value"
    ]  # fmt: skip
    list_filter = ["target_kind"]
    search_fields = ["actor_username", "target_name", "field"]
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEntry | None = None) -> bool:
        return False
