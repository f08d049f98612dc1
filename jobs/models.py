"""Jobs, their device allocations, and the append-only event trail."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from .choices import Consolidation, DependencyKind, EventActor, JobState, Notify


class JobArray(models.Model):
    """One submission of `size` copies of a job (Slurm's --array, a sweep): task i runs
    with GPULAB_ARRAY_INDEX=i, and at most `max_running` tasks hold GPUs at once."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    size = models.PositiveIntegerField()
    max_running = models.PositiveIntegerField(null=True, blank=True)  # None: no cap
    created_at = models.DateTimeField(auto_now_add=True)
    # When the one message about the ended array went out (jobs.notifications, jobs.webhooks):
    # claimed by a conditional UPDATE, so two tasks ending at once, or every task of a
    # cancelled array, send one between them even while the cache is down.
    ended_mailed_at = models.DateTimeField(null=True, blank=True)
    ended_posted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        cap = f", {self.max_running} at once" if self.max_running else ""
        return f"array {self.pk} ({self.size} tasks{cap})"


class Job(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    group = models.ForeignKey(
        "accounts.LabGroup", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=128)
    image = models.CharField(max_length=512)
    command = models.JSONField(help_text="argv list; never run through a shell.")
    env = models.JSONField(default=dict, blank=True)
    num_gpus = models.PositiveSmallIntegerField(default=1)
    accepted_types = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "Device type names the job may run on; [] = any. Best-fit placement tries them in "
            "this order; AlloX (the default) picks the one that serves the job best."
        ),
    )
    consolidation = models.CharField(
        max_length=16, choices=Consolidation.choices, default=Consolidation.PREFERRED
    )
    walltime_seconds = models.PositiveIntegerField(null=True, blank=True)
    max_retries = models.PositiveSmallIntegerField(default=0)
    # Jobs this one waits for (Slurm's --dependency): it is not scheduled before they have
    # all ended (afterany) or all succeeded (afterok); `scheduler.snapshot` holds it.
    depends_on = models.ManyToManyField(
        "self", symmetrical=False, related_name="dependents", blank=True
    )
    dependency = models.CharField(
        max_length=8, choices=DependencyKind.choices, default=DependencyKind.AFTER_OK
    )
    array = models.ForeignKey(
        JobArray, null=True, blank=True, on_delete=models.PROTECT, related_name="tasks"
    )
    array_index = models.PositiveIntegerField(null=True, blank=True)
    # Email its owner when it starts or ends (jobs.notifications).
    notify = models.CharField(max_length=8, choices=Notify.choices, default="", blank=True)
    # Idle reaping (jobs.idle_services): when its owner was warned that its GPUs sit idle
    # (cleared when the job leaves RUNNING, or found in use at the deadline), from when
    # its use is judged again after a warning was lifted, and until when an admin keeps
    # it from reaping.
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_judged_from = models.DateTimeField(null=True, blank=True)
    idle_exempt_until = models.DateTimeField(null=True, blank=True)
    # An interactive session (Jupyter, a shell, VS Code's server): not preempted by LAS
    # (only reclaimed beyond its group's guarantee), a bounded walltime, judged for
    # idleness on its own window, and given a port on its node and a secret token to reach
    # it (jobs.sessions). The port is the current attempt's (assigned at each start); the
    # token is the owner's to see.
    interactive = models.BooleanField(default=False)
    # While PREEMPTING: the job its GPUs go to (None for a move or a drain). The scheduler
    # does not let that job claim more victims while these checkpoint.
    preempted_for = models.PositiveIntegerField(null=True, blank=True)
    session_port = models.PositiveIntegerField(null=True, blank=True)
    session_token = models.CharField(max_length=64, blank=True)

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    reason = models.CharField(
        max_length=500, blank=True, help_text="Why it is pending or why it failed, in words."
    )
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=0, help_text="Incremented at every start.")
    retries_used = models.PositiveSmallIntegerField(default=0)
    retry_not_before = models.DateTimeField(
        null=True, blank=True, help_text="A retried job waits until then (backoff)."
    )
    preemption_count = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)

    # Tiresias state (see scheduler/core/types.py for units): GPU-seconds normalized by speed.
    queue_level = models.PositiveSmallIntegerField(default=0)
    queue_entered_at = models.DateTimeField(null=True, blank=True)
    attained_service = models.FloatField(default=0.0)
    service_since_promotion = models.FloatField(default=0.0)
    executed_since_promotion = models.FloatField(default=0.0, help_text="Seconds run.")
    waiting_since_promotion = models.FloatField(default=0.0, help_text="Seconds pending.")
    # Accounting is folded in at each transition (jobs.services), so no periodic writes are
    # needed and a crash loses nothing: the live part is `now - pending_since` while
    # PENDING, and `now - started_at` on the held devices while holding them.
    pending_since = models.DateTimeField(null=True, blank=True)
    total_run_seconds = models.FloatField(default=0.0, help_text="Wall seconds holding devices.")

    submitted_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="Start of the current run.")
    first_started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "submitted_at"], name="job_state_submitted"),
            models.Index(fields=["owner", "state"], name="job_owner_state"),
            # The job list's order (newest first): a page is read from the index, not sorted.
            models.Index(fields=["-submitted_at", "-id"], name="job_submitted_desc"),
            # The snapshot's Gittins history: the latest finished jobs, without a sort.
            models.Index(fields=["state", "-finished_at"], name="job_finished"),
            # The queue page's waiting-time histogram reads jobs first started in a window.
            models.Index(fields=["first_started_at"], name="job_first_started"),
            # The idle sweep lifts every warning while reaping is off, every minute: the few
            # warned jobs, not a scan of the whole history.
            models.Index(
                fields=["idle_warned_at"],
                name="job_idle_warned",
                condition=Q(idle_warned_at__isnull=False),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=[choice.value for choice in JobState]),
                name="job_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(consolidation__in=[choice.value for choice in Consolidation]),
                name="job_consolidation_valid",
            ),
            models.CheckConstraint(
                condition=Q(attained_service__gte=0), name="job_attained_service_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(retries_used__lte=F("max_retries")), name="job_retries_within_limit"
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"


class Allocation(models.Model):
    """One device held by one attempt of a job, from `started_at` until `ended_at`.

    A live allocation has `ended_at` NULL. The partial unique index below is the last
    guard against double-booking: whatever races above it, the database refuses a second
    live allocation of the same device.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    attempt = models.PositiveIntegerField()
    device = models.ForeignKey(
        "cluster.Device", on_delete=models.PROTECT, related_name="allocations"
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # The job let go of the device at `ended_at`, but a cancelled or timed-out attempt's
    # process may still run on it until the node poll has stopped it: the scheduler keeps
    # the device busy until then (Slurm's COMPLETING). Set with `ended_at` when the
    # process is known to be gone (it exited, or was stopped by the stop task).
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "device_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["device"],
                condition=Q(ended_at__isnull=True),
                name="allocation_one_live_per_device",
            ),
            models.UniqueConstraint(
                fields=["job", "attempt", "device"], name="allocation_unique_device_per_attempt"
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="allocation_ends_after_start",
            ),
        ]
        indexes = [
            # Every round reads the few ended-but-unreleased rows (busy GPUs) and every poll
            # releases them: without this they would scan the whole allocation history.
            models.Index(
                fields=["ended_at"],
                condition=Q(ended_at__isnull=False, released_at__isnull=True),
                name="allocation_unreleased",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} on device {self.device_id}"


class JobEvent(models.Model):
    """Append-only audit trail: every state change and notable fact about a job."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=16, choices=JobState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=JobState.choices, blank=True)
    actor = models.CharField(max_length=16, choices=EventActor.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.from_state or '·'} → {self.to_state or '·'}"
