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

from .models import Job

logger = logging.getLogger(__name__)

WORDS = {
    "RUNNING": "started",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "CANCELLED": "was cancelled",
}


def job_notify_request(*, job_id: int, state: str) -> None:
    """Send the mail about `job_id` reaching `state`: through Celery where rounds run
    there, here otherwise (the demo's embedded loop has no worker)."""
    if settings.GPULAB_SCHEDULER_MODE == "celery":
        from .tasks import job_notify_task  # tasks imports this module

        job_notify_task.delay(job_id=job_id, state=state)
    else:
        job_notify(job_id=job_id, state=state)


def job_notify(*, job_id: int, state: str) -> bool:
    """Mail the owner that the job reached `state`; False if there was nobody to tell or
    the mail server refused (logged)."""
    job = Job.objects.select_related("owner").filter(pk=job_id).first()
    if job is None or not job.owner.email:
        return False
    subject, body = notification_text(job, state)
    try:
        send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [job.owner.email])
    except (smtplib.SMTPException, OSError) as exc:
        logger.warning("Mail about job %s (%s) not sent: %s", job_id, state, exc)
        return False
    return True


def notification_text(job: Job, state: str) -> tuple[str, str]:
    """The subject and body: what happened, why, and where to look."""
    what = WORDS.get(state, state.lower())
    subject = f"[gpulab] Job #{job.pk} {job.name[:60]} {what}"
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
