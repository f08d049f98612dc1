"""The one mapping from domain errors to HTTP responses for the REST API."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from .errors import ApplicationError, ValidationFailed


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler: domain errors become 4xx JSON with a readable message."""
    if isinstance(exc, ValidationFailed):
        return Response(exc.errors, status=400)
    if isinstance(exc, ApplicationError):
        body = {"detail": exc.message, "code": exc.default_code, **exc.extra}
        return Response(body, status=exc.status_code)
    if isinstance(exc, Http404):
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = drf_exceptions.PermissionDenied()
    return exception_handler(exc, context)
