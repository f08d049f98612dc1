"""Placeholder: filled in by the dashboard work (issue 6)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse


def quota_list_page(request: HttpRequest) -> HttpResponse:
    raise NotImplementedError


def quota_user_page(request: HttpRequest, user_id: int) -> HttpResponse:
    raise NotImplementedError


def quota_group_page(request: HttpRequest, group_id: int) -> HttpResponse:
    raise NotImplementedError


def scheduler_settings_page(request: HttpRequest) -> HttpResponse:
    raise NotImplementedError


def audit_log_page(request: HttpRequest) -> HttpResponse:
    raise NotImplementedError
