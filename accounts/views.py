"""The API tokens page: create (shown once) and revoke your own tokens; the password
change pages; the 429 of a locked-out login or old-password check."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import PasswordChangeView
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from config.errors import NotFound, ValidationFailed

from . import selectors, services
from .forms import AdminLockoutPasswordChangeForm, LockoutPasswordChangeForm


# The page shows a freshly created key once: no browser or proxy may keep a copy.
@never_cache
@login_required
def token_list_page(request: HttpRequest) -> HttpResponse:
    new_key = None
    status = 200
    if request.method == "POST":
        try:
            token, new_key = services.api_token_create(
                user=request.user, name=request.POST.get("name", "")
            )
        except ValidationFailed as exc:
            messages.error(request, exc.message)
            status = 400
        else:
            messages.success(
                request, f"Token '{token.name}' created. Copy it now: it is not shown again."
            )
    return render(
        request,
        "accounts/tokens.html",
        {"tokens": selectors.api_token_list(user=request.user), "new_key": new_key},
        status=status,
    )


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def token_revoke_page(request: HttpRequest, token_id: int) -> HttpResponse:
    if request.method != "POST":
        # The login form sends a revoke posted after the session ended back here as a GET:
        # show the tokens and revoke nothing (a GET never changes anything), saying so.
        messages.info(request, "Nothing was revoked; press Revoke next to a token to revoke it.")
        return redirect("accounts:tokens")
    try:
        token = services.api_token_revoke(user=request.user, token_id=token_id)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    messages.success(request, f"Token '{token.name}' revoked.")
    return redirect("accounts:tokens")


class LockoutPasswordChangeView(PasswordChangeView):
    """Django's password change (it checks the old password, runs the password validators
    and keeps the session logged in), with the old password counted as a login attempt
    (accounts.forms.PasswordChangeLockoutMixin, which needs the request)."""

    form_class = LockoutPasswordChangeForm

    def get_form_kwargs(self) -> dict[str, Any]:
        return {**super().get_form_kwargs(), "request": self.request}


def admin_password_change_page(request: HttpRequest) -> HttpResponse:
    """The Django admin's own password change (AdminSite.password_change, whose form class
    cannot be replaced), with the same lockout; config/urls.py routes
    /admin/password_change/ here, wrapped in the admin's staff check."""
    request.current_app = admin.site.name
    return LockoutPasswordChangeView.as_view(
        form_class=AdminLockoutPasswordChangeForm,
        template_name="registration/password_change_form.html",
        success_url=reverse("admin:password_change_done"),
        extra_context=admin.site.each_context(request),
    )(request)


def login_lockout_status(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a view whose form counts password guesses (a login form with
    accounts.forms.LoginLockoutMixin, a password change form with
    PasswordChangeLockoutMixin): a refused, locked-out attempt answers 429 Too Many
    Requests with Retry-After, instead of the 200 of an ordinary wrong password."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        form = (getattr(response, "context_data", None) or {}).get("form")
        locked_until = getattr(form, "locked_until", None)
        if locked_until is not None:
            response.status_code = 429
            seconds = (locked_until - timezone.now()).total_seconds()
            response["Retry-After"] = str(max(1, math.ceil(seconds)))
        return response

    return wrapped
