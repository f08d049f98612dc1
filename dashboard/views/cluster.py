"""Placeholder: filled in by the dashboard work (issue 6)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse


def cluster_page(request: HttpRequest) -> HttpResponse:
    raise NotImplementedError


def node_drain_page(request: HttpRequest, node_id: int) -> HttpResponse:
    raise NotImplementedError


def node_undrain_page(request: HttpRequest, node_id: int) -> HttpResponse:
    raise NotImplementedError
