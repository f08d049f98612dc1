"""HTML pages for jobs: list, submit (and clone), detail, its log fragment, cancel.

Thin: services and selectors do the work; what is here is presentation (figures, the
wording of messages) and mapping domain errors to what a page shows.
"""

from __future__ import annotations

import logging
import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods
from django.views.decorators.vary import vary_on_headers
from plotly.subplots import make_subplots

from accounts.models import User
from agents.logs import job_log_tail
from agents.runtimes import LOG_STREAMS
from agents.selectors import job_measured_rates
from config.errors import ApplicationError, NotFound, ValidationFailed
from dashboard.charts import PALETTE, figure_json, figure_new, time_axis
from scheduler.models import StartForecast
from scheduler.selectors import scheduler_config_get, start_forecast_of, start_forecast_score

from . import idle_services, selectors, services
from .choices import TERMINAL_STATES, JobState
from .forms import SERVICE_FIELD_TO_FORM_FIELD, JobSubmitForm, clone_caveats, initial_from_job
from .models import Job, JobEvent

logger = logging.getLogger(__name__)

LIST_REFRESH_SECONDS = 15
DETAIL_REFRESH_SECONDS = 10
# Readings further apart than this (or than two buckets of a long window) mean the job
# was not on the GPUs in between: minute rows come one a minute, heartbeats more often.
GPU_USE_GAP = timedelta(minutes=3)
LOG_TAIL_LINES = 200


# --------------------------------------------------------------------------- preemption notes

# jobs.services.job_preempt writes "Preempted for job #<id>: <reason>" into the event
# message and the job's reason; this reads the preempting job back out of that text.
_PREEMPTED_FOR = re.compile(r"\APreempted for job #(\d+): (.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class PreemptionNote:
    """A "Preempted for <job>: <why>" text, with the job only if the viewer may see it."""

    by_job_id: int
    by_job: Job | None  # None: not the viewer's to see; the page says "another job"
    why: str


@dataclass(frozen=True)
class Described:
    """A text from the trail (event message, job reason), possibly a preemption note."""

    text: str
    preemption: PreemptionNote | None


def _preempting_job_id(text: str) -> int | None:
    match = _PREEMPTED_FOR.match(text)
    return int(match.group(1)) if match else None


def _describe_all(texts: list[str], *, user: User) -> list[Described]:
    """Each text, with preemption notes resolved in one query for all of them, and every
    other mention of a job the user may not see made "another job"."""
    texts = selectors.texts_for_viewer(texts, user=user)
    visible = selectors.jobs_visible_by_id(
        user=user,
        job_ids=[job_id for text in texts if (job_id := _preempting_job_id(text)) is not None],
    )
    described = []
    for text in texts:
        match = _PREEMPTED_FOR.match(text)
        note = None
        if match:
            job_id = int(match.group(1))
            note = PreemptionNote(by_job_id=job_id, by_job=visible.get(job_id), why=match[2])
        described.append(Described(text=text, preemption=note))
    return described


@dataclass(frozen=True)
class JobRow:
    job: Job
    reason: Described
    estimate: StartForecast | None = None


@dataclass(frozen=True)
class EventRow:
    event: JobEvent
    message: Described


# --------------------------------------------------------------------------- list


@login_required
def job_list_page(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state") or None
    if state not in (None, *JobState.values):
        state = None
    owner = request.GET.get("owner") or None
    jobs = selectors.job_list(user=request.user, states=[state] if state else [], owner=owner)
    counts = selectors.job_state_counts(user=request.user, owner=owner)
    page = Paginator(jobs, 50).get_page(request.GET.get("page"))
    page_jobs = list(page.object_list)
    reasons = _describe_all([job.reason for job in page_jobs], user=request.user)
    return render(
        request,
        "jobs/list.html",
        {
            "page": page,
            "rows": [
                JobRow(job=job, reason=reason, estimate=start_forecast_of(job))
                for job, reason in zip(page_jobs, reasons, strict=True)
            ],
            "state": state,
            "owner": owner,
            # Filter links keep the owner filter, pager links keep both filters.
            "owner_query": urlencode({"owner": owner}) if owner else "",
            "filter_query": urlencode({k: v for k, v in (("state", state), ("owner", owner)) if v}),
            "states": [(value, label, counts[value]) for value, label in JobState.choices],
            "refresh_seconds": LIST_REFRESH_SECONDS,
            "now": timezone.now(),
        },
    )


# --------------------------------------------------------------------------- submit and clone


@login_required
def job_submit_page(request: HttpRequest) -> HttpResponse:
    clone_of = None
    initial: dict[str, Any] = {}
    if request.method != "POST" and "clone" in request.GET:
        # The same access rule as the detail page: another student's job is a 404, so
        # cloning can never show its command or environment.
        clone_of = _job_or_404(request, request.GET["clone"])
        initial = initial_from_job(clone_of, user=request.user)
    form = JobSubmitForm(request.POST or None, user=request.user, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            job = services.job_submit(owner=request.user, spec=form.to_spec())
        except ValidationFailed as exc:
            for field, field_errors in exc.errors.items():
                target = SERVICE_FIELD_TO_FORM_FIELD.get(field, field)
                for error in field_errors:
                    form.add_error(target if target in form.fields else None, error)
        else:
            if job.array_id is None:
                submitted = f"Job #{job.pk} submitted; it is pending."
            else:
                submitted = (
                    f"Array {job.array_id} submitted: {job.array.size} jobs, pending; "
                    "this is task 0."
                )
            messages.success(request, submitted)
            return redirect("jobs:detail", job_id=job.pk)
    if request.method == "POST" and "clone" in request.GET:
        # The form posts back to its own address, ?clone= included: a refused copy keeps
        # saying what it copies and what it could not carry over (the fields keep what was
        # typed). Checked again, as on GET; a job gone from view just loses the note.
        try:
            clone_of = _job_or_404(request, request.GET["clone"])
        except Http404:
            clone_of = None
    return render(
        request,
        "jobs/submit.html",
        {
            "form": form,
            "clone_of": clone_of,
            "clone_caveats": (
                clone_caveats(clone_of, user=request.user) if clone_of is not None else []
            ),
        },
        status=400 if form.errors else 200,  # a refused submission, like the API's 400
    )


def _job_or_404(request: HttpRequest, job_id: Any) -> Job:
    try:
        return selectors.job_get_for_user(user=request.user, job_id=int(job_id))
    except (NotFound, ValueError, TypeError) as exc:
        raise Http404("No such job.") from exc


# --------------------------------------------------------------------------- detail


@login_required
def job_detail_page(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(request, job_id)
    events = list(selectors.job_events(job=job))
    # The reason and the event messages share one lookup of the jobs they mention.
    described = _describe_all([job.reason, *(event.message for event in events)], user=request.user)
    terminal = job.state in TERMINAL_STATES
    now = timezone.now()
    # The row holds the service of ended runs; the current run's is added here, as the
    # scheduler's snapshot does, so a running job does not read 0 until it stops.
    live = selectors.jobs_live_service(job_ids=[job.pk], now=now).get(job.pk, 0.0)
    # A job that ended before it ever ran has no use to chart.
    show_gpu_use = job.first_started_at is not None or not terminal
    gpu_use = selectors.job_gpu_use(job=job) if show_gpu_use else []
    estimate = start_forecast_of(job)
    # The idle-reaping settings matter to a running job only (its warning, the Keep form).
    idle = scheduler_config_get() if job.state == JobState.RUNNING else None
    # Whether the idle sweep judges this job: batch jobs while reaping is on, sessions on
    # their own window whatever `idle_reap` says (jobs.idle_services).
    judged = idle is not None and idle_services.idle_window_of(idle, job.interactive) > 0
    # A session's address while it holds GPUs; its token only for its owner (the selector
    # decides), who gets it in the link, as Jupyter takes it: `?token=`.
    session = (
        selectors.sessions_access(jobs=[job], viewer=request.user).get(job.pk)
        if job.interactive
        else None
    )
    response = render(
        request,
        "jobs/detail.html",
        {
            "job": job,
            "reason": described[0],
            "events": [
                EventRow(event, message)
                for event, message in zip(events, described[1:], strict=True)
            ],
            "can_cancel": not terminal,
            "ended": terminal,
            # Quoted as a shell would need it, so 'my run' stays one word and '' shows.
            "command_line": shlex.join(job.command),
            "walltime": _minutes_and_seconds(job.walltime_seconds) if job.walltime_seconds else "",
            "attained_service": job.attained_service + live,
            "run_minutes": selectors.job_run_seconds(
                state=job.state,
                total_run_seconds=job.total_run_seconds,
                started_at=job.started_at,
                now=now,
            )
            / 60.0,
            "measured_speeds": sorted(job_measured_rates(job_id=job.pk, now=now).items()),
            "dependencies": selectors.job_dependencies(job=job, user=request.user),
            "estimate": estimate,
            "now": now,
            # Idle reaping (jobs.idle_services): the warning and its deadline, the exemption,
            # and whether this viewer may grant one (an admin, the group's coordinator).
            "idle_reap": judged,
            "can_keep": judged
            and idle_services.may_keep_from_reaping(
                request.user, owner_id=job.owner_id, group_id=job.group_id
            ),
            # Whom the owner can ask to keep it: a coordinator only where the group has one.
            "group_coordinated": idle is not None
            and job.idle_warned_at is not None
            and job.group is not None
            and job.group.coordinators.exists(),
            "idle_deadline": (
                job.idle_warned_at + timedelta(minutes=idle.idle_grace_minutes)
                if idle is not None and judged and job.idle_warned_at
                else None
            ),
            "idle_kept": job.idle_exempt_until
            if idle is not None and job.idle_exempt_until and job.idle_exempt_until > now
            else None,
            # How far past forecasts were off, to say how far to trust this one.
            "forecast_score": (start_forecast_score() if estimate and estimate.start_at else None),
            "session": session,
            "session_link": _session_link(session) if session is not None else "",
            "show_gpu_use": show_gpu_use,
            "gpu_figure": _gpu_use_figure(gpu_use) if show_gpu_use else "",
            # The chart's numbers in words, for screen readers and pages without JavaScript.
            "gpu_use_summary": [_gpu_use_summary(device) for device in gpu_use],
            "charts": show_gpu_use,
            # A finished job does not change any more: no refresh, no polling of its log.
            "refresh_seconds": None if terminal else DETAIL_REFRESH_SECONDS,
        },
    )
    if session is not None and session.token:
        # The page holds a secret, as the API tokens page does: kept out of caches.
        add_never_cache_headers(response)
    return response


def _session_link(session: selectors.SessionAccess) -> str:
    """The address to open: with `?token=` for the owner (Jupyter logs them in with it),
    bare for anyone else, who has no token to give."""
    if not session.token:
        return session.url
    return f"{session.url}?{urlencode({'token': session.token})}"


def _minutes_and_seconds(seconds: int) -> str:
    """A limit typed in minutes, exactly: "60 min", or "2 min 30 s" for one set through
    the API in seconds (rounding it would show a limit the job does not have)."""
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


@dataclass(frozen=True)
class GpuUseSummary:
    """One device's line of the GPU-use chart, as a table row."""

    label: str
    mean_utilization_pct: float | None  # None: the device reported no utilization
    peak_memory_gib: float
    first_at: datetime
    last_at: datetime


def _gpu_use_summary(device: selectors.DeviceGpuUse) -> GpuUseSummary:
    utilizations = [p.utilization_pct for p in device.points if p.utilization_pct is not None]
    return GpuUseSummary(
        label=device.label,
        mean_utilization_pct=sum(utilizations) / len(utilizations) if utilizations else None,
        peak_memory_gib=max(p.memory_used_mb for p in device.points) / 1024,
        first_at=device.points[0].at,
        last_at=device.points[-1].at,
    )


def _gpu_use_figure(devices: list[selectors.DeviceGpuUse]) -> str:
    """Utilization (top) and memory used (bottom) per device, on one shared time axis."""
    figure = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.1,
        subplot_titles=("Utilization (%)", "Memory used (GiB)"),
        figure=figure_new(height=440),
    )
    # One x for every device, distinct also across a daylight saving change (`TimeAxis`:
    # local wall-clock text would draw the repeated autumn hour twice at one x, doubling
    # the line back); to the second, as raw readings come several a minute.
    axis = time_axis((point.at for device in devices for point in device.points), seconds=True)
    for number, device in enumerate(devices):
        placed = axis.points([point.at for point in device.points])
        times: list[str | None] = []
        texts: list[str | None] = []
        utilization: list[float | None] = []
        memory: list[float | None] = []
        previous = None
        gap = max(GPU_USE_GAP, 2 * device.step)
        for index, point in enumerate(device.points):
            # A gap (preempted, pending, node silent) is a break in the line, not a slope.
            if previous is not None and point.at - previous > gap:
                times.append(None)
                texts.append(None)
                utilization.append(None)
                memory.append(None)
            previous = point.at
            times.append(placed["x"][index])
            if "text" in placed:
                texts.append(placed["text"][index])
            utilization.append(point.utilization_pct)
            memory.append(round(point.memory_used_mb / 1024, 2))
        style = {
            # A job that just started has a point or two: a line alone would be invisible.
            "mode": "lines" if len(device.points) > 30 else "lines+markers",
            "line": {"color": PALETTE[number % len(PALETTE)], "width": 1.5},
            "legendgroup": device.label,
            "name": device.label,
            "x": times,
            # Across a change, x runs at a fixed offset: the hover names the true wall clock.
            **({"text": texts} if "text" in placed else {}),
        }
        figure.add_scatter(
            y=utilization,
            row=1,
            col=1,
            hovertemplate=f"{axis.hover}<br>%{{y:.0f}} %<extra>%{{fullData.name}}</extra>",
            **style,
        )
        figure.add_scatter(
            y=memory,
            row=2,
            col=1,
            showlegend=False,
            hovertemplate=f"{axis.hover}<br>%{{y:.2f}} GiB<extra>%{{fullData.name}}</extra>",
            **style,
        )
    # figure_new styled only the axes that existed; the grid adds a second pair. Room at
    # the top for the panel titles, which the house style's margin (no title) lacks.
    figure.update_xaxes(gridcolor="#eceff3", zeroline=False, **axis.axis)
    figure.update_yaxes(gridcolor="#eceff3", zeroline=False)
    figure.update_yaxes(range=[0, 100], row=1, col=1)
    figure.update_yaxes(rangemode="tozero", row=2, col=1)
    figure.update_layout(margin={"t": 32})
    figure.update_annotations(font_size=13)  # the panel titles
    if not devices:
        figure.add_annotation(
            text="No GPU use recorded yet.",
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"size": 14, "color": "#5b6575"},
        )
    return figure_json(figure)


# job_detail.js sends this header with its fetches; a request without it (the <noscript>
# links, a link opened in a new tab) gets the log as a whole page rather than a bare fragment.
SCRIPT_HEADER = "X-Refresh"


@login_required
@require_GET
@never_cache
@vary_on_headers(SCRIPT_HEADER)
def job_logs_fragment(request: HttpRequest, job_id: int) -> HttpResponse:
    """The log region of the detail page, as an HTML fragment that job_detail.js loads
    (as a whole page, jobs/logs.html, for a request that is not the script's).

    Apart from the page because reading a log is SSH to the node: a node that does not
    answer can take the SSH timeout × connect attempts, and the page must not wait for it.
    """
    job = _job_or_404(request, job_id)
    stream = request.GET.get("stream", "stdout")
    if stream not in LOG_STREAMS:
        stream = "stdout"
    fragment = request.headers.get(SCRIPT_HEADER) == "1"
    log = job_log_tail(job=job, stream=stream, max_lines=LOG_TAIL_LINES)
    return render(
        request,
        "jobs/_logs.html" if fragment else "jobs/logs.html",
        {
            "job": job,
            "log": log,
            "streams": LOG_STREAMS,
            # A log that could not be read now is worth another try, ended job or not.
            "final": job.state in TERMINAL_STATES and not log.unavailable,
            "read_at": timezone.now(),
        },
    )


# --------------------------------------------------------------------------- cancel


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def job_cancel_page(request: HttpRequest, job_id: int) -> HttpResponse:
    if request.method != "POST":
        # The login form sends a cancel posted after the session ended back here as a GET:
        # show the job and cancel nothing (a GET never changes anything), saying so.
        job = _job_or_404(request, job_id)
        if job.state not in TERMINAL_STATES:
            messages.info(
                request, f"Job #{job.pk} was not cancelled; press Cancel job to cancel it."
            )
        return redirect("jobs:detail", job_id=job.pk)
    try:
        services.job_cancel(job_id=job_id, by=request.user)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Job #{job_id} cancelled.")
    return redirect("jobs:detail", job_id=job_id)


@login_required
@require_http_methods(["POST"])
def job_idle_keep_page(request: HttpRequest, job_id: int) -> HttpResponse:
    """A lab admin, or a coordinator of the job's group, keeps a running job from idle
    reaping for the hours chosen."""
    try:
        hours = int(request.POST.get("hours", ""))
    except ValueError:
        hours = 0
    try:
        job = idle_services.job_idle_keep(job_id=job_id, by=request.user, hours=hours)
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    except ApplicationError as exc:  # hours out of range, or the job ended
        messages.error(request, exc.message)
        return redirect("jobs:detail", job_id=job_id)
    messages.success(
        request,
        f"Job #{job.pk} is kept from idle reaping until "
        f"{timezone.localtime(job.idle_exempt_until):%Y-%m-%d %H:%M}.",
    )
    return redirect("jobs:detail", job_id=job.pk)
