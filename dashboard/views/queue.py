"""Placeholder: filled in by the dashboard work (issue 6)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse


def queue_page(request: HttpRequest) -> HttpResponse:
    raise NotImplementedError
