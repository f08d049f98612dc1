"""Admin pages: quotas and weights, scheduler settings, and the audit log of both.

Thin: writes go through `accounts.services` (quotas) and `scheduler.settings_services`,
which validate, write one audit entry per changed field, and raise ValidationFailed naming
the field; here the errors are put back on the form. Every page is admin-only, checked
before any lookup, so a student learns nothing (not even which ids exist).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.forms import BaseForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from accounts.models import AuditEntry, LabGroup, User
from accounts.selectors import guarantees_summary, quota_audit_history
from accounts.services import (
    GROUP_QUOTA_FIELDS,
    QUOTA_FIELDS,
    group_quota_update,
    type_quota_field,
    user_quota_update,
)
from cluster.models import DeviceType
from config.errors import ValidationFailed
from scheduler.selectors import scheduler_config_get, scheduler_config_locked
from scheduler.settings_services import EDITABLE_FIELDS, scheduler_config_update

from ..forms import QuotaForm, SchedulerSettingsForm, thresholds_text

PAGE_SIZE = 50
HISTORY_SIZE = 20


def _require_admin(request: HttpRequest) -> None:
    if not request.user.is_lab_admin:
        raise PermissionDenied("This page is for lab admins.")


def _errors_to_form(form: BaseForm, exc: ValidationFailed) -> None:
    """Put a service's field errors on the form; an unknown field becomes a form error."""
    for field, field_errors in exc.errors.items():
        for error in field_errors:
            form.add_error(field if field in form.fields else None, error)


def _query_with(request: HttpRequest, **changes: Any) -> str:
    """This page's query string with `changes` applied (for pager links that keep filters)."""
    query = request.GET.copy()
    for key, value in changes.items():
        query[key] = value
    return query.urlencode()


def _pager_links(request: HttpRequest, page: Page, key: str) -> dict[str, str | None]:
    """Query strings of the previous and next page (None at either end), filters kept."""
    return {
        "prev": _query_with(request, **{key: page.previous_page_number()})
        if page.has_previous()
        else None,
        "next": _query_with(request, **{key: page.next_page_number()}) if page.has_next() else None,
    }


# --------------------------------------------------------------------------- quotas


def _quota_users(search: str) -> QuerySet[User]:
    users = User.objects.select_related("default_group").order_by("username")
    if search:
        users = users.filter(
            Q(username__icontains=search)
            | Q(first_name__icontains=search)
            | Q(last_name__icontains=search)
        )
    return users


def _quota_groups(search: str) -> QuerySet[LabGroup]:
    groups = LabGroup.objects.annotate(member_count=Count("members")).order_by("name")
    if search:
        groups = groups.filter(name__icontains=search)
    return groups


@login_required
def quota_list_page(request: HttpRequest) -> HttpResponse:
    _require_admin(request)
    search = request.GET.get("q", "").strip()[:100]
    groups = Paginator(_quota_groups(search), PAGE_SIZE).get_page(request.GET.get("groups_page"))
    users = Paginator(_quota_users(search), PAGE_SIZE).get_page(request.GET.get("users_page"))
    return render(
        request,
        "dashboard/quotas.html",
        {
            "search": search,
            "groups": groups,
            "users": users,
            "groups_pager": _pager_links(request, groups, "groups_page"),
            "users_pager": _pager_links(request, users, "users_page"),
            "guarantees": guarantees_summary(),
        },
    )


def _quota_edit(
    request: HttpRequest,
    *,
    account: User | LabGroup,
    kind: AuditEntry.TargetKind,
    name: str,
    update: Callable[[dict[str, Any]], list[AuditEntry]],
) -> HttpResponse:
    type_names = list(DeviceType.objects.order_by("name").values_list("name", flat=True))
    is_group = isinstance(account, LabGroup)
    fields = GROUP_QUOTA_FIELDS if is_group else QUOTA_FIELDS
    initial: dict[str, Any] = {field: getattr(account, field) for field in fields}
    initial.update(
        (type_quota_field(type_name), cap)
        for type_name, cap in account.type_quotas.values_list("device_type__name", "max_gpus")
    )
    form = QuotaForm(
        request.POST if request.method == "POST" else None,
        initial=initial,
        type_names=type_names,
        group=is_group,
    )
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                entries = update(dict(form.cleaned_data))
            except ValidationFailed as exc:
                _errors_to_form(form, exc)
            else:
                if entries:
                    changed = ", ".join(entry.field for entry in entries)
                    messages.success(request, f"Saved {kind.label.lower()} {name}: {changed}.")
                else:
                    messages.info(request, f"Nothing changed for {kind.label.lower()} {name}.")
                return redirect("dashboard:quotas")
        status = 400
    history = quota_audit_history(account=account)[:HISTORY_SIZE]
    return render(
        request,
        "dashboard/quota_edit.html",
        {"form": form, "account": account, "kind": kind, "name": name, "history": history},
        status=status,
    )


@login_required
def quota_user_page(request: HttpRequest, user_id: int) -> HttpResponse:
    _require_admin(request)
    account = get_object_or_404(User, pk=user_id)
    return _quota_edit(
        request,
        account=account,
        kind=AuditEntry.TargetKind.USER,
        name=account.username,
        update=lambda changes: user_quota_update(
            actor=request.user, user_id=account.pk, changes=changes
        ),
    )


@login_required
def quota_group_page(request: HttpRequest, group_id: int) -> HttpResponse:
    _require_admin(request)
    account = get_object_or_404(LabGroup, pk=group_id)
    return _quota_edit(
        request,
        account=account,
        kind=AuditEntry.TargetKind.GROUP,
        name=account.name,
        update=lambda changes: group_quota_update(
            actor=request.user, group_id=account.pk, changes=changes
        ),
    )


# --------------------------------------------------------------------------- scheduler


def _current_text(value: Any) -> str:
    if value is None:
        return "off (empty)"
    if isinstance(value, list):
        return thresholds_text(value) or "(none: one queue)"
    return str(value)


@login_required
def scheduler_settings_page(request: HttpRequest) -> HttpResponse:
    _require_admin(request)
    status = 200
    if request.method != "POST":
        config = scheduler_config_get()
        form = SchedulerSettingsForm(instance=config)
    else:
        # The row stays locked from the form's conflict check (against the row as read
        # here) to the save, so another admin's save lands wholly before (and is seen as
        # a conflict) or after this one.
        with transaction.atomic():
            config = scheduler_config_locked()
            form = SchedulerSettingsForm(request.POST, instance=config)
            # Read before validating: a bound ModelForm writes the posted values onto `config`.
            stored = {field: getattr(config, field) for field in EDITABLE_FIELDS}
            if form.is_valid():
                try:
                    entries = scheduler_config_update(actor=request.user, changes=form.changes())
                except ValidationFailed as exc:
                    _errors_to_form(form, exc)
                else:
                    if entries:
                        changed = ", ".join(entry.field for entry in entries)
                        messages.success(
                            request, f"Saved {changed}. The next scheduling round uses them."
                        )
                    else:
                        messages.info(request, "Nothing changed.")
                    return redirect("dashboard:scheduler-settings")
        status = 400
        # The page describes the row as stored, not the rejected values the form holds.
        for field, value in stored.items():
            setattr(config, field, value)
    current = {field: _current_text(getattr(config, field)) for field in EDITABLE_FIELDS}
    fields = [(form[name], current[name]) for name in EDITABLE_FIELDS]
    history = AuditEntry.objects.filter(target_kind=AuditEntry.TargetKind.SCHEDULER)[:HISTORY_SIZE]
    return render(
        request,
        "dashboard/scheduler_settings.html",
        {
            "form": form,
            "fields": fields,
            "updated_at": config.updated_at,
            "warnings": config.clean_warnings(),
            "history": history,
        },
        status=status,
    )


# --------------------------------------------------------------------------- audit log


@login_required
def audit_log_page(request: HttpRequest) -> HttpResponse:
    _require_admin(request)
    kind = request.GET.get("kind") or None
    if kind not in (None, *AuditEntry.TargetKind.values):
        kind = None
    entries = AuditEntry.objects.all()
    if kind:
        entries = entries.filter(target_kind=kind)
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "dashboard/audit.html",
        {
            "page": page,
            "kind": kind,
            "kinds": AuditEntry.TargetKind.choices,
            "pager": _pager_links(request, page, "page"),
        },
    )
