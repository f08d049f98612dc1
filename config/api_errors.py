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
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler

from .errors import ApplicationError, ValidationFailed


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler: domain errors become 4xx JSON with a readable message."""
    if isinstance(exc, ValidationFailed):
        return Response(exc.errors, status=400)
    if isinstance(exc, ApplicationError):
        body = {"detail": exc.message, "code": exc.default_code, **exc.extra}
        return Response(body, status=exc.status_code)
    if isinstance(exc, Http404) and (formats := _formats_if_unknown(context)) is not None:
        # DRF answers an unknown `?format=` with a bare 404 before the view runs. In JSON,
        # as every API error: the view's first renderer may be another (the schema's YAML).
        request = context["request"]
        request.accepted_renderer, request.accepted_media_type = JSONRenderer(), "application/json"
        message = f"Unknown format; choose {' or '.join(formats)}."
        return Response({"format": [message]}, status=400)
    if isinstance(exc, Http404):
        # Django's own message can name a model or a query: not for clients.
        exc = drf_exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        # Keep the view's reason ("The usage report is for lab admins and group
        # coordinators.") if it gave one.
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


def _formats_if_unknown(context: dict[str, Any]) -> list[str] | None:
    """The view's formats when the request asked for another with `?format=`, else None.

    DRF's content negotiation raises Http404 when no renderer has the format asked for;
    it runs before the view, so `query_params_check` never sees the parameter. Each view's
    own renderers decide (the schema also speaks yaml).
    """
    view, request = context.get("view"), context.get("request")
    if view is None or request is None:
        return None
    wanted = request.GET.get(api_settings.URL_FORMAT_OVERRIDE)
    formats = sorted({renderer.format for renderer in view.get_renderers()})
    return formats if wanted and wanted not in formats else None


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
# two shapes cannot both match (a field's value is a list or an object, `detail` here a
# string).
_PARSE_ERROR_SCHEMA = {
    "type": "object",
    "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
    "required": ["detail", "code"],
    "example": {"detail": "JSON nested too deeply.", "code": "parse_error"},
}
BAD_BODY = OpenApiResponse(
    response={"oneOf": [_FIELD_ERRORS_SCHEMA, _PARSE_ERROR_SCHEMA]},
    description=(
        "Input rejected: each bad field or query parameter with its messages, or, for a "
        'body that is not JSON or nests too deeply, `{"detail", "code": "parse_error"}`.'
    ),
)
# A body of nested objects and lists (the heartbeat's gpus[i].processes[j]) has its errors
# nested the same way, a list's items keyed by their index: {"gpus": {"0": {...}}}.
BAD_NESTED_BODY = OpenApiResponse(
    response={
        "oneOf": [
            {
                "type": "object",
                "additionalProperties": {
                    "oneOf": [
                        {"type": "array", "items": {"type": "string"}},
                        {"type": "object", "description": "The same shape, one level down."},
                    ]
                },
                "example": {"gpus": {"0": {"power_w": ["Ensure this value is at most 5000."]}}},
            },
            _PARSE_ERROR_SCHEMA,
        ]
    },
    description=(
        "Input rejected: each bad field or query parameter with its messages, nested as the "
        "body is (a list's items by their index), or, for a body that is not JSON or nests "
        'too deeply, `{"detail", "code": "parse_error"}`.'
    ),
)
# A body sent as anything but `Content-Type: application/json` (a form post included).
NOT_JSON = OpenApiResponse(
    response=ErrorOutput,
    description="The body is not JSON (`unsupported_media_type`).",
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
