"""The one mapping from domain errors to HTTP responses for the REST API.

Two body shapes, whatever went wrong: `{"<field>": ["message", ...]}` when input was
rejected (a bad body field or query parameter), and `{"detail": "...", "code": "..."}` for
everything else, `code` being a stable word a client can branch on (`not_found`,
`not_authenticated`, `throttled`, `illegal_transition`, ...). What Django answers outside
DRF under /api/ gets the second shape from `config.api_middleware`.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
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
        # Django's own message can name a model or a query: not for clients.
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        # Keep the view's reason ("The usage report is for lab admins.") if it gave one.
        exc = drf_exceptions.PermissionDenied(str(exc) or None)
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, drf_exceptions.APIException):
        body = response.data
        # A string `detail` is DRF's `{"detail": "..."}`; a list is a rejected body field
        # that happens to be named `detail`, which keeps the field shape without a `code`.
        if isinstance(body, dict) and set(body) == {"detail"} and isinstance(body["detail"], str):
            detail = exc.detail
            body["code"] = getattr(detail, "code", None) or exc.default_code
    return response


class ErrorOutput(serializers.Serializer):
    """`{"detail", "code"}`: every error that is not about one input field."""

    detail = serializers.CharField()
    code = serializers.CharField(help_text="A stable word: not_found, throttled, conflict, ...")


# `{"<field>": ["message", ...]}`: input rejected, each bad field (or parameter) named.
_FIELD_ERRORS_SCHEMA = {
    "type": "object",
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
    "example": {"num_gpus": ["A whole number, 1 or more."]},
}
FIELD_ERRORS = OpenApiResponse(
    response=_FIELD_ERRORS_SCHEMA,
    description="Input rejected: each bad field or query parameter with its messages.",
)

# An operation that reads a JSON body also answers 400 before any field is looked at: a
# body that is not JSON, or nests too deep (`config.text_guards`), is `parse_error`. The
# two shapes cannot both match (a field's value is a list, `detail` here a string).
BAD_BODY = OpenApiResponse(
    response={
        "oneOf": [
            _FIELD_ERRORS_SCHEMA,
            {
                "type": "object",
                "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
                "required": ["detail", "code"],
                "example": {"detail": "JSON nested too deeply.", "code": "parse_error"},
            },
        ]
    },
    description=(
        "Input rejected: each bad field or query parameter with its messages, or, for a "
        'body that is not JSON or nests too deeply, `{"detail", "code": "parse_error"}`.'
    ),
)


def error_response(description: str) -> OpenApiResponse:
    """A documented `{"detail", "code"}` response of an operation."""
    return OpenApiResponse(response=ErrorOutput, description=description)


# Every /api/v1/ operation needs credentials (DRF's IsAuthenticated, or a node's token for
# the heartbeat); each lists this as its 401.
NOT_AUTHENTICATED = error_response(
    "No credentials (`not_authenticated`) or a wrong, revoked or expired one "
    "(`authentication_failed`)."
)
