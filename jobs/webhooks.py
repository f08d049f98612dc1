"""A lab group's jobs posted to the group's own chat (its `LabGroup.webhook_url`).

A lab admin sets the URL for a group whose coordinator asked to hear about every job
charged to it, whatever each job's `notify` says: a job that starts running, succeeds,
fails or is cancelled. An array is posted once, as a whole, when its last task has ended
(a tally of how its tasks ended), and its tasks' starts are not posted: the same rules as
the owner's mail (jobs.notifications). Only a job's first start is posted: under LAS a job
is preempted and resumed many times, and a channel told of every resume stops being read.
A failure that will be retried goes back to PENDING, never through FAILED, so it is not
posted either; the job's end is.

Requested after the transition commits (`jobs.services.job_transition`), and delivered as
the admins' node events are (agents.webhooks): by the shared Celery task, retried, then
logged and dropped; inline with the embedded loop. The body names the job, its owner and
group, its state and reason, never its command, environment or session: commands carry
secrets, and the channel is read by people who may not see the job's page.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.webhooks import webhook_send
from dashboard.templatetags.gpulab_format import duration  # the pages' wording

from .choices import JobState
from .models import Job
from .notifications import array_end_claim, array_tally_if_ended
from .selectors import job_has_run_before

logger = logging.getLogger(__name__)

EVENTS = {
    JobState.RUNNING: "job_started",
    JobState.SUCCEEDED: "job_succeeded",
    JobState.FAILED: "job_failed",
    JobState.CANCELLED: "job_cancelled",
}
# The states `job_transition` asks for a post about (for a job charged to a group).
WEBHOOK_STATES = frozenset(EVENTS)

WORDS = {
    JobState.RUNNING: "started",
    JobState.SUCCEEDED: "succeeded",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "was cancelled",
}

NAME_CHARS = 60  # as much of a job's name as the line shows
REASON_CHARS = 200


def job_webhook_request(*, job_id: int, state: str) -> None:
    """Post to the job's group's webhook that the job reached `state`, if the group has
    one. Runs after the change committed, so it never raises: what it cannot do is logged.

    One query, the job with its group's URL (none at all for a job without a group:
    `job_transition` asks only for those); an array task's end adds the array's tally.
    """
    try:
        _job_webhook_send(job_id=job_id, state=state)
    except Exception:
        logger.exception("Webhook about job %s (%s) not sent", job_id, state)


def _job_webhook_send(*, job_id: int, state: str) -> None:
    job = (
        Job.objects.select_related("owner", "group")
        .only(
            "owner",
            "group",
            "array",
            "name",
            "state",
            "reason",
            "attempt",
            "total_run_seconds",
            "finished_at",
            "array_index",
            "owner__username",
            "group__name",
            "group__webhook_url",
        )
        .filter(pk=job_id)
        .first()
    )
    if job is None or job.group is None or not job.group.webhook_url:
        return
    if state == JobState.RUNNING and job_has_run_before(job.pk):
        return  # a resume after a preemption, or a retry: the end will say how it went
    if job.array_id is None:
        payload = job_event_payload(job, state)
    else:
        payload = _array_payload(job, state)
        if payload is None:
            return
    # The URL just read serves the inline post; the task reads it again at each try.
    webhook_send(payload, group_id=job.group_id, url=job.group.webhook_url)


def job_event_payload(job: Job, state: str) -> dict[str, Any]:
    """The body about one job reaching `state`: a line for people, the facts as fields."""
    state = str(state)  # a JobState from job_transition: its plain value in the body
    run_seconds = job.total_run_seconds
    what = WORDS.get(state, state.lower())
    if state != JobState.RUNNING and run_seconds >= 1:
        what += f" after {duration(run_seconds)}"
    # The reason of a job that moved on since (a quick end after its start) is not this
    # state's.
    reason = job.reason if job.state == state else ""
    line = f"Job {job.pk} {_quoted(job.name)} of {_who(job)} {what}"
    if reason and state != JobState.RUNNING:
        line += f": {chat_text(_shortened(reason, REASON_CHARS))}"
    else:
        line += "."
    url = _job_url(job.pk)
    # An end as its page says; a start is now, when it began running (`started_at` is
    # when its launch began).
    at = job.finished_at if state != JobState.RUNNING and job.finished_at else timezone.now()
    return {
        "text": f"[gpulab] {line}" + (f" {url}" if url else ""),
        "event": EVENTS.get(state, state.lower()),
        "job": job.pk,
        "name": job.name,
        "owner": job.owner.username,
        "group": job.group.name if job.group else "",
        "state": state,
        "reason": reason,
        "attempt": job.attempt,
        "run_seconds": round(run_seconds),
        "at": at.isoformat(),
        "site": settings.GPULAB_SITE_URL,
        "url": url,
    }


def _array_payload(task: Job, state: str) -> dict[str, Any] | None:
    """The one body about an array, once its last task has ended; None before (and for a
    task's start), or when another task's end already posted it."""
    if state == JobState.RUNNING:
        return None
    tally = array_tally_if_ended(array_id=task.array_id)
    if tally is None:
        return None
    # Two tasks ending at once may both find the array ended: one post between them.
    if not array_end_claim(array_id=task.array_id, field="ended_posted_at"):
        return None
    first = (
        Job.objects.filter(array_id=task.array_id, array_index=0)
        .values_list("pk", flat=True)
        .first()
    )
    size = sum(tally.values())
    parts = ", ".join(f"{n} {name.lower()}" for name, n in sorted(tally.items()))
    name = task.name.removesuffix(f"[{task.array_index}]")  # the array's, not the task's
    url = _job_url(first) if first is not None else ""
    line = (
        f"Array {task.array_id} {_quoted(name)} of {_who(task)} ended: {parts} (all {size} tasks)."
    )
    # The array's state, for a receiver that colours by it: its worst task's.
    overall = next(
        s for s in (JobState.FAILED, JobState.CANCELLED, JobState.SUCCEEDED) if tally.get(s)
    )
    return {
        "text": f"[gpulab] {line}" + (f" {url}" if url else ""),
        "event": "array_ended",
        "job": first,
        "array": task.array_id,
        "size": size,
        "tally": dict(sorted(tally.items())),
        "name": name,
        "owner": task.owner.username,
        "group": task.group.name if task.group else "",
        "state": str(overall),
        "reason": "",
        "at": timezone.now().isoformat(),
        "site": settings.GPULAB_SITE_URL,
        "url": url,
    }


def chat_text(text: str) -> str:
    """User-written `text` made inert in a chat line: Slack's three escapes (`<!channel>`
    would ping the whole channel, `<url|label>` disguise a link; Mattermost reads them the
    same), a word joiner after `@`, which Mattermost would read as a mention, and inside
    Markdown's `[label](url)` and `![image](url)`, which Mattermost renders as a link or
    an image in a message from gpulab."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("](", "]\u2060(").replace("![", "!\u2060[")
    return text.replace("@", "@\u2060")


def _quoted(name: str) -> str:
    return f'"{chat_text(_shortened(name, NAME_CHARS))}"'


def _who(job: Job) -> str:
    who = chat_text(job.owner.username)  # Django's usernames may hold "@"
    return f"{who} (group {job.group.name})" if job.group else who


def _shortened(text: str, limit: int) -> str:
    """`text` on one line (a chat line is one), cut to `limit` characters, its end "…"."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _job_url(job_id: int) -> str:
    site = settings.GPULAB_SITE_URL
    return f"{site.rstrip('/')}/jobs/{job_id}/" if site else ""
