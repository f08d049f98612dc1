"""Errors Django answers outside DRF under /api/ are JSON too, never an HTML page.

DRF shapes the errors its views raise (`config.api_errors`), but some never reach a view: a
URL that matches nothing (404), a body over `DATA_UPLOAD_MAX_MEMORY_SIZE` (Django's 400
page), an exception nothing handled (500). A client parsing JSON got HTML for those, and a
500 in DEBUG a traceback. Placed near the top of MIDDLEWARE, so it also sees what inner
middleware answered.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.response import Response

API_PREFIX = "/api/"

# status -> (detail, code) for what Django answered itself; codes as DRF's errors use them.
_ERRORS = {
    400: ("Bad request.", "bad_request"),
    403: ("You do not have permission to perform this action.", "permission_denied"),
    404: ("Not found.", "not_found"),
    405: ("Method not allowed.", "method_not_allowed"),
    500: ("Server error.", "server_error"),
}


class ApiJsonErrors:
    """JSON `{"detail", "code"}` for every non-JSON error response under /api/, and a 413
    naming the limit for a body over `DATA_UPLOAD_MAX_MEMORY_SIZE` before it is read."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(API_PREFIX):
            return self.get_response(request)
        if (too_big := _body_too_big(request)) is not None:
            return too_big
        response = self.get_response(request)
        # A DRF Response is already shaped (`config.api_errors`), whatever its renderer.
        shaped = isinstance(response, Response) or _is_json(response)
        if response.status_code >= 400 and not shaped:
            return _error(response.status_code)
        return response


def _body_too_big(request: HttpRequest) -> JsonResponse | None:
    # Django checks the limit only when `request.body` or `request.POST` is read, and DRF's
    # JSON parser reads the stream directly: without this, a JSON body had no limit at all.
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _error(400)
    if limit is None or length <= limit:
        return None
    body = {
        "detail": f"Request body too large: {length} bytes, at most {limit} accepted.",
        "code": "request_too_large",
        "limit_bytes": limit,
    }
    return JsonResponse(body, status=413)


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").split(";")[0].strip() == "application/json"


def _error(status: int) -> JsonResponse:
    try:
        default = (f"{HTTPStatus(status).phrase}.", "error")
    except ValueError:
        default = ("Error.", "error")
    detail, code = _ERRORS.get(status, default)
    return JsonResponse({"detail": detail, "code": code}, status=status)
