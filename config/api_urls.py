"""API routes answer with and without their trailing slash.

Django's APPEND_SLASH answers `POST /api/v1/jobs` with a 301 to `/api/v1/jobs/`, and HTTP
clients (curl -L, requests, browsers) follow a 301 as a GET: the client saw a 200 with a job
list while nothing was submitted. Each route is therefore served at both spellings; the
slashed one is canonical (`reverse()`, the OpenAPI schema).
"""

from __future__ import annotations

from django.urls import URLPattern, path
from rest_framework.views import APIView


def api_path(route: str, view: type[APIView], *, name: str) -> list[URLPattern]:
    """`route` (ending in "/") and the same route without the slash, both to `view`."""
    if not route.endswith("/"):
        raise ValueError(f"API route {route!r} must end with '/'.")
    return [
        path(route, view.as_view(), name=name),
        # schema=None: the same operation once in the OpenAPI document, not twice.
        path(route.removesuffix("/"), view.as_view(schema=None)),
    ]
