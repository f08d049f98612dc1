"""Forms that refuse brute force: the site's login page and the Django admin's, and the
old password of both password-change pages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm, AdminPasswordChangeForm
from django.contrib.auth.forms import AuthenticationForm, PasswordChangeForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.views.decorators.debug import sensitive_variables

from .lockout import (
    client_ip,
    lockout_message,
    login_attempt_release,
    login_attempt_reserve,
    login_failure_record,
    login_success_record,
)


class LoginLockoutMixin:
    """For an AuthenticationForm: reserve the attempt (accounts.lockout) before the
    password is checked, refusing a locked-out username/address pair or address; keep
    wrong passwords counted, and clear the pair on success.

    `locked_until` is set when the attempt was refused, so the view can answer 429
    (accounts.views.login_lockout_status).
    """

    locked_until: datetime | None = None

    @sensitive_variables()
    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username") or ""  # type: ignore[attr-defined]
        if not username or not self.cleaned_data.get("password"):  # type: ignore[attr-defined]
            # No password is checked (the field errors say what is missing): nothing to count.
            return super().clean()  # type: ignore[misc]
        ip = client_ip(self.request)  # type: ignore[attr-defined]
        self.locked_until = login_attempt_reserve(username=username, ip=ip)
        if self.locked_until is not None:
            raise ValidationError(lockout_message(self.locked_until), code="locked_out")
        try:
            cleaned = super().clean()  # type: ignore[misc]
        except ValidationError:
            # user_cache is None: no user has this name and password, a guess that stays
            # counted. The attempt that reaches the limit still gets the plain answer; the
            # next ones are refused. Otherwise the password was right and the account may
            # not log in here (inactive, or not staff on the admin's form): not a guess.
            if self.user_cache is None:  # type: ignore[attr-defined]
                login_failure_record(username=username, ip=ip)
            else:
                login_attempt_release(username=username, ip=ip)
            raise
        login_success_record(username=username, ip=ip)
        return cleaned


class LoginForm(LoginLockoutMixin, AuthenticationForm):
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "Wrong user name or password.",
    }


class AdminLoginForm(LoginLockoutMixin, AdminAuthenticationForm):
    pass


class PasswordChangeLockoutMixin:
    """For a PasswordChangeForm: the old password is a password guess, counted like a
    login's (accounts.lockout) for the session's username from the client's address.

    The form needs the request (`request=`, for the address); accounts.views.
    LockoutPasswordChangeView passes it. `locked_until` is set when the check was refused,
    so login_lockout_status answers 429.
    """

    locked_until: datetime | None = None

    def __init__(self, *args: Any, request: HttpRequest, **kwargs: Any) -> None:
        self.request = request
        super().__init__(*args, **kwargs)

    @sensitive_variables()
    def clean_old_password(self) -> str:
        username = self.user.get_username()  # type: ignore[attr-defined]
        ip = client_ip(self.request)
        self.locked_until = login_attempt_reserve(username=username, ip=ip)
        if self.locked_until is not None:
            raise ValidationError(lockout_message(self.locked_until), code="locked_out")
        try:
            old_password: str = super().clean_old_password()  # type: ignore[misc]
        except ValidationError:
            login_failure_record(username=username, ip=ip)
            raise
        login_success_record(username=username, ip=ip)
        return old_password


class LockoutPasswordChangeForm(PasswordChangeLockoutMixin, PasswordChangeForm):
    pass


class AdminLockoutPasswordChangeForm(PasswordChangeLockoutMixin, AdminPasswordChangeForm):
    pass
