"""HTML pages for jobs: list, submit, detail, cancel. Thin: services and selectors do the work."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from config.errors import ApplicationError, NotFound, ValidationFailed

from . import selectors, services
from .choices import TERMINAL_STATES, JobState
from .forms import SERVICE_FIELD_TO_FORM_FIELD, JobSubmitForm


@login_required
def job_list_page(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state") or None
    if state not in (None, *JobState.values):
        state = None
    owner = request.GET.get("owner") or None
    jobs = selectors.job_list(user=request.user, state=state, owner=owner)
    counts = selectors.job_state_counts(user=request.user)
    page = Paginator(jobs, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "jobs/list.html",
        {
            "page": page,
            "state": state,
            "owner": owner,
            "states": [(value, label, counts[value]) for value, label in JobState.choices],
        },
    )


@login_required
def job_submit_page(request: HttpRequest) -> HttpResponse:
    form = JobSubmitForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            job = services.job_submit(owner=request.user, spec=form.to_spec())
        except ValidationFailed as exc:
            for field, field_errors in exc.errors.items():
                target = SERVICE_FIELD_TO_FORM_FIELD.get(field, field)
                for error in field_errors:
                    form.add_error(target if target in form.fields else None, error)
        else:
            messages.success(request, f"Job #{job.pk} submitted; it is pending.")
            return redirect("jobs:detail", job_id=job.pk)
    return render(request, "jobs/submit.html", {"form": form})


@login_required
def job_detail_page(request: HttpRequest, job_id: int) -> HttpResponse:
    try:
        job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    return render(
        request,
        "jobs/detail.html",
        {
            "job": job,
            "events": selectors.job_events(job=job),
            "can_cancel": job.state not in TERMINAL_STATES,
        },
    )


@login_required
@require_POST
def job_cancel_page(request: HttpRequest, job_id: int) -> HttpResponse:
    try:
        services.job_cancel(job_id=job_id, by=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Job #{job_id} cancelled.")
    return redirect("jobs:detail", job_id=job_id)
