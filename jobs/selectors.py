"""Reads of jobs, with the access rule in one place: students see their own, admins all."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from accounts.models import User
from config.errors import NotFound

from .choices import JobState
from .models import Job, JobEvent


def job_visible_to(*, user: User) -> QuerySet[Job]:
    jobs = Job.objects.select_related("owner", "group")
    if user.is_lab_admin:
        return jobs
    return jobs.filter(owner=user)


def job_get_for_user(*, user: User, job_id: int) -> Job:
    """The job if `user` may see it; otherwise NotFound (never reveal that it exists)."""
    job = job_visible_to(user=user).filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"Job {job_id} not found.")
    return job


def job_list(
    *,
    user: User,
    state: str | None = None,
    owner: str | None = None,
    group: str | None = None,
) -> QuerySet[Job]:
    """Jobs the user may see, newest first, filtered by state, owner name and group name."""
    jobs = job_visible_to(user=user)
    if state:
        jobs = jobs.filter(state=state)
    if owner:
        jobs = jobs.filter(owner__username=owner)
    if group:
        jobs = jobs.filter(group__name=group)
    return jobs.order_by("-submitted_at", "-id")


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    return job.events.select_related("actor_user").order_by("created_at", "id")


def job_state_counts(*, user: User) -> dict[str, int]:
    counts = dict.fromkeys(JobState.values, 0)
    rows = job_visible_to(user=user).order_by().values("state").annotate(total=Count("id"))
    for row in rows:
        counts[row["state"]] = row["total"]
    return counts
