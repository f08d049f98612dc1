"""The API tokens page: create (shown once) and revoke your own tokens."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from config.errors import NotFound, ValidationFailed

from . import selectors, services


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
@require_POST
def token_revoke_page(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token = services.api_token_revoke(user=request.user, token_id=token_id)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    messages.success(request, f"Token '{token.name}' revoked.")
    return redirect("accounts:tokens")
