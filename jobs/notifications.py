"""Email to a job's owner when it starts or ends, as they asked (`Job.notify`, Slurm's
--mail-type).

Requested after the transition commits (`jobs.services.job_transition`). With the Celery
loop it is a task on the default queue, so a slow mail server never holds up a round or an
agent; the embedded demo loop sends at once, to Django's console backend unless
GPULAB_EMAIL_HOST names a server. A mail that cannot be sent is logged, and lost: the job's
page has the same facts.
"""

from __future__ import annotations

import logging
import smtplib

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Count
from django.utils import timezone

from .choices import TERMINAL_STATES
from .models import Job, JobArray

logger = logging.getLogger(__name__)

# Not a state: the warning that a job's GPUs sit idle (jobs.idle_services), mailed to its
# owner whatever `notify` says, since the job will be cancelled unless they act.
IDLE_WARNING = "IDLE_WARNING"

WORDS = {
    "RUNNING": "started",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "CANCELLED": "was cancelled",
}


def job_notify_request(*, job_id: int, state: str) -> None:
    """Send the mail about `job_id` reaching `state`: through Celery where rounds run
    there, here otherwise (the demo's embedded loop has no worker).

    Runs after the change committed, so nothing here may fail what made the change (a
    cancel's request, a round): a broker or mail failure is logged and the mail lost.
    """
    try:
        if settings.GPULAB_SCHEDULER_MODE == "celery":
            from .tasks import job_notify_task  # tasks imports this module

            job_notify_task.delay(job_id=job_id, state=state)
        else:
            job_notify(job_id=job_id, state=state)
    except Exception:
        logger.exception("Mail about job %s (%s) not sent", job_id, state)


def job_notify(*, job_id: int, state: str) -> bool:
    """Mail the owner that the job reached `state`; False if there was nobody to tell or
    the mail server refused (logged).

    An array task's end is not mailed by itself: the array's last task to end mails once
    for all of them (Slurm mails an array as a whole), and its start is not mailed. A
    job's resumes and retries are not asked for (jobs.services._mail_wanted).
    """
    job = Job.objects.select_related("owner", "array").filter(pk=job_id).first()
    if job is None or not job.owner.email:
        return False
    if state == IDLE_WARNING:
        subject, body = idle_warning_text(job)
    elif job.array_id is not None:
        summary = _array_summary(job, state)
        if summary is None:
            return False
        subject, body = summary
    else:
        subject, body = notification_text(job, state)
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [job.owner.email])
    except (smtplib.SMTPException, OSError, ValueError) as exc:
        # ValueError: Django's BadHeaderError, were a line break ever to reach a header.
        logger.warning("Mail about job %s (%s) not sent: %s", job_id, state, exc)
        return False
    return True


def _array_summary(task: Job, state: str) -> tuple[str, str] | None:
    """The one mail about an array, once its last task has ended; None before (or for a
    task's start), or when another task's end already sent it."""
    if state == "RUNNING":
        return None
    tally = array_tally_if_ended(array_id=task.array_id)
    if tally is None:
        return None  # tasks still to end
    # Every task's end asks (jobs.services._mail_wanted), whatever state it ended in: the
    # tally, not the last task's end, says whether a task failed.
    if task.notify == "fail" and not tally.get("FAILED"):
        return None
    # Two tasks ending at once may both find the array ended: one mail between them.
    if not array_end_claim(array_id=task.array_id, field="ended_mailed_at"):
        return None
    size = task.array.size
    parts = ", ".join(f"{n} {name.lower()}" for name, n in sorted(tally.items()))
    name = task.name.removesuffix(f"[{task.array_index}]")  # the array's, not the task's
    subject = f"[gpulab] Array {task.array_id} ({_one_line(name)[:60]}) ended: {parts}"
    lines = [f"All {size} tasks of array {task.array_id} have ended: {parts}."]
    first = Job.objects.filter(array_id=task.array_id, array_index=0).values_list("pk", flat=True)
    if settings.GPULAB_SITE_URL and first:
        site = settings.GPULAB_SITE_URL.rstrip("/")
        lines.append(f"Its first task: {site}/jobs/{first[0]}/")
    lines += ["", "You asked for this mail when you submitted the array (notify)."]
    return subject, "\n".join(lines)


def array_end_claim(*, array_id: int, field: str) -> bool:
    """Claim the one message of kind `field` ("ended_mailed_at", "ended_posted_at") about
    an ended array: True for exactly one caller, whoever asks and however many at once."""
    claimed = JobArray.objects.filter(pk=array_id, **{f"{field}__isnull": True}).update(
        **{field: timezone.now()}
    )
    return claimed == 1


def array_tally_if_ended(*, array_id: int) -> dict[str, int] | None:
    """How many of the array's tasks ended in each state ({"SUCCEEDED": 3, "FAILED": 1});
    None while any task has not ended."""
    tally = dict(
        Job.objects.filter(array_id=array_id)
        .values("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
        .order_by()
    )
    if not tally or any(name not in TERMINAL_STATES for name in tally):
        return None
    return tally


def _one_line(text: str) -> str:
    """`text` with its line breaks and other spacing as single spaces: a header holds one
    line (Django refuses a line break there)."""
    return " ".join(text.split())


def idle_warning_text(job: Job) -> tuple[str, str]:
    """The subject and body of an idle warning: the event's own words, and where to look."""
    warning = job.events.filter(message__startswith="Idle: ").order_by("-created_at", "-id").first()
    subject = f"[gpulab] Job #{job.pk} {_one_line(job.name)[:60]} is idle and will be cancelled"
    lines = [f"Job #{job.pk} ({job.name}) holds {job.num_gpus} GPU(s) and is not using them."]
    if warning is not None:
        lines.append(warning.message)
    lines.append(
        "If it is still needed, make it use its GPUs, or ask a lab admin (or a coordinator "
        "of its group) to keep it running; if not, cancel it so others can use them."
    )
    if settings.GPULAB_SITE_URL:
        lines.append(f"Details: {settings.GPULAB_SITE_URL.rstrip('/')}/jobs/{job.pk}/")
    lines.append("")
    lines.append("The lab cancels jobs that leave their GPUs idle (idle reaping).")
    return subject, "\n".join(lines)


def notification_text(job: Job, state: str) -> tuple[str, str]:
    """The subject and body: what happened, why, and where to look."""
    what = WORDS.get(state, state.lower())
    subject = f"[gpulab] Job #{job.pk} {_one_line(job.name)[:60]} {what}"
    lines = [f"Job #{job.pk} ({job.name}) {what}."]
    if state == "FAILED" and job.exit_code is not None:
        lines.append(f"Exit code: {job.exit_code}.")
    if job.reason and state != "RUNNING":
        lines.append(f"Reason: {job.reason}")
    lines.append(f"Image: {job.image}; {job.num_gpus} GPU(s); attempt {job.attempt}.")
    if settings.GPULAB_SITE_URL:
        lines.append(f"Details and logs: {settings.GPULAB_SITE_URL.rstrip('/')}/jobs/{job.pk}/")
    lines.append("")
    lines.append("You asked for this mail when you submitted the job (notify).")
    return subject, "\n".join(lines)
