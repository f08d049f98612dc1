"""Domain errors. Services raise them; `config.api_errors` maps them to HTTP in one place.

Views never translate errors ad hoc. `ValidationFailed` carries a
field -> messages dict so API clients and forms can point at the field that was wrong.
"""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """Base of every error a service raises on purpose."""

    status_code = 400
    default_code = "invalid"

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}


class ValidationFailed(ApplicationError):
    """Input was rejected; `errors` maps a field name to its messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        summary = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items())
        super().__init__(summary)
        self.errors = errors


class IllegalTransition(ApplicationError):
    """A job state change that the state machine does not allow, or that lost a race."""

    status_code = 409
    default_code = "illegal_transition"


class Conflict(ApplicationError):
    """The request is well formed but contradicts what is recorded (e.g. a GPU that
    another node still holds)."""

    status_code = 409
    default_code = "conflict"


class NotFound(ApplicationError):
    status_code = 404
    default_code = "not_found"


class QuotaExceeded(ApplicationError):
    status_code = 429
    default_code = "quota_exceeded"
