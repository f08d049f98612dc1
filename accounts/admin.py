from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.forms import UserChangeForm
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from .forms import AdminLoginForm
from .models import ApiToken, AuditEntry, DeviceTypeQuota, LabGroup, User
from .services import (
    accounts_delete,
    api_tokens_revoke,
    default_group_errors,
    lab_group_members_set,
    lab_group_save,
    user_account_save,
    user_lab_groups_set,
    user_password_set_audit,
)

# The Django admin's login counts failures and locks out like the site's (accounts.forms).
admin.site.login_form = AdminLoginForm


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


class LabUserChangeForm(UserChangeForm):
    """The user page edits lab-group membership (not Django's auth groups: the role, not
    per-user permissions, decides what a user may do) and keeps the default group among
    the user's groups."""

    lab_groups = forms.ModelMultipleChoiceField(
        queryset=LabGroup.objects.all(),
        required=False,
        widget=FilteredSelectMultiple("lab groups", is_stacked=False),
        help_text="The groups this user's jobs may be charged to.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["lab_groups"].initial = list(self.instance.lab_groups.all())

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        # Without a valid group list (its own error is shown) there is nothing to check against.
        if "lab_groups" in cleaned:
            errors = default_group_errors(
                default_group=cleaned.get("default_group"), groups=cleaned["lab_groups"]
            )
            for field, messages in errors.items():
                self.add_error(field, messages)
        return cleaned


ROLE_HELP = (
    "The role decides what a user may do: admins get the lab-admin pages and this Django "
    "admin, students neither."
)


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    form = LabUserChangeForm
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
    # No is_staff, is_superuser, auth groups or per-user permissions: User.save derives the
    # first two from the role, and nothing in gpulab reads the other two.
    fieldsets = [
        (None, {"fields": ["username", "password"]}),
        ("Personal info", {"fields": ["first_name", "last_name", "email"]}),
        (
            "Role and lab groups",
            {
                "fields": ["is_active", "role", "lab_groups", "default_group"],
                "description": ROLE_HELP,
            },
        ),
        ("Important dates", {"fields": ["last_login", "date_joined"]}),
        (
            "Fair share and limits",
            {"fields": ["weight", "max_gpus", "max_running_jobs", "max_pending_jobs"]},
        ),
    ]
    add_fieldsets = [
        (
            None,
            {
                "classes": ["wide"],
                "fields": ["username", "usable_password", "password1", "password2", "role"],
                "description": ROLE_HELP,
            },
        ),
    ]
    inlines = [DeviceTypeQuotaInline]
    # Weights and limits change only on the audited quota editor (/manage/quotas/).
    readonly_fields = ["weight", "max_gpus", "max_running_jobs", "max_pending_jobs"]

    # The change view runs in one transaction (ModelAdmin.changeform_view): the services'
    # audit entries commit or roll back with the edit.
    def save_model(
        self, request: HttpRequest, obj: User, form: forms.ModelForm, change: bool
    ) -> None:
        user_account_save(actor=request.user, user=obj)

    def save_related(
        self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        if "lab_groups" in form.cleaned_data:  # the change form; the add form has no groups
            user_lab_groups_set(
                user=form.instance,
                groups=form.cleaned_data["lab_groups"],
                default_group=form.instance.default_group,
                actor=request.user,
            )

    def delete_model(self, request: HttpRequest, obj: User) -> None:
        accounts_delete(actor=request.user, accounts=[obj])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        accounts_delete(actor=request.user, accounts=list(queryset))

    @method_decorator(sensitive_post_parameters())
    def user_change_password(
        self, request: HttpRequest, id: str, form_url: str = ""
    ) -> HttpResponse:
        # Django's view saves the new password itself, with no place to pass the actor to:
        # it runs here in one transaction, the user's row locked, and a stored password
        # that differs afterwards is audited in that transaction.
        with transaction.atomic():
            user = self.get_object(request, unquote(id))
            before = None
            if user is not None and request.method == "POST":
                before = (
                    User.objects.select_for_update(no_key=True)
                    .values_list("password", flat=True)
                    .get(pk=user.pk)
                )
            response = super().user_change_password(request, id, form_url)
            if before is not None:
                user.refresh_from_db(fields=["password"])
                if user.password != before:
                    user_password_set_audit(actor=request.user, user=user)
        return response


@admin.register(LabGroup)
class LabGroupAdmin(admin.ModelAdmin):
    list_display = [
        "name", "weight", "guaranteed_gpus", "max_gpus", "max_running_jobs", "max_pending_jobs"
    ]  # fmt: skip
    search_fields = ["name", "description"]
    filter_horizontal = ["members", "coordinators"]
    # A URL typed without a scheme is taken as https (Django 6's default, said now).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    inlines = [GroupDeviceTypeQuotaInline]
    # Weights and limits change only on the audited quota editor (/manage/quotas/); usage
    # only as jobs give their GPUs back (the scheduler's fair share is computed from it).
    readonly_fields = [
        "weight", "guaranteed_gpus", "max_gpus", "max_running_jobs", "max_pending_jobs", "usage",
        "usage_updated_at",
    ]  # fmt: skip

    def save_model(
        self, request: HttpRequest, obj: LabGroup, form: forms.ModelForm, change: bool
    ) -> None:
        lab_group_save(actor=request.user, group=obj)

    def delete_model(self, request: HttpRequest, obj: LabGroup) -> None:
        accounts_delete(actor=request.user, accounts=[obj])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[LabGroup]) -> None:
        accounts_delete(actor=request.user, accounts=list(queryset))

    def save_related(
        self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool
    ) -> None:
        # Members and coordinators through the audited service first; Django's save_m2m
        # then finds them set.
        lab_group_members_set(
            actor=request.user,
            group=form.instance,
            members=form.cleaned_data["members"],
            coordinators=form.cleaned_data["coordinators"],
        )
        super().save_related(request, form, formsets, change)


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

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # Revoking (audited) is how a token stops working; a deleted one would leave no trace.
        return False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke: the token stops working at once")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        selected = list(queryset.values_list("pk", flat=True))
        revoked = api_tokens_revoke(actor=request.user, token_ids=selected)
        already = len(selected) - revoked
        self.message_user(
            request,
            f"Revoked {revoked} token(s)."
            + (f" {already} had been revoked already." if already else ""),
        )


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
