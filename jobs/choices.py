"""The job state machine: states, groups, and every legal transition, in one place.

    PENDING → STARTING → RUNNING → SUCCEEDED | FAILED | CANCELLED
    RUNNING → PREEMPTING → PENDING            (checkpoint, then requeue)
    STARTING/RUNNING → LOST → PENDING | FAILED (node vanished; requeue or give up)
    any non-terminal → CANCELLED

Three additions a cluster needs and the sketch leaves out, all documented in the README:
STARTING → FAILED (the launch itself failed, e.g. the image does not exist),
PREEMPTING → SUCCEEDED | FAILED (the job exited on its own during the grace period), and
RUNNING → PENDING (an attempt failed and the job has retries left, `max_retries`).
"""

from __future__ import annotations

from django.db import models


class JobState(models.TextChoices):
    PENDING = "PENDING", "Pending"
    STARTING = "STARTING", "Starting"
    RUNNING = "RUNNING", "Running"
    PREEMPTING = "PREEMPTING", "Preempting"
    LOST = "LOST", "Lost"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"
    CANCELLED = "CANCELLED", "Cancelled"


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
ACTIVE_STATES = frozenset(set(JobState) - TERMINAL_STATES)
# States in which a job holds devices through a live allocation.
HOLDING_STATES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING})

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.STARTING, JobState.CANCELLED}),
    JobState.STARTING: frozenset(
        {JobState.RUNNING, JobState.LOST, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.PENDING,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTING,
            JobState.LOST,
        }
    ),
    JobState.PREEMPTING: frozenset(
        {JobState.PENDING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.LOST: frozenset({JobState.PENDING, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def sources_of(target: JobState) -> frozenset[JobState]:
    """Every state from which `target` may be reached."""
    return frozenset(state for state, targets in TRANSITIONS.items() if target in targets)


class Consolidation(models.TextChoices):
    REQUIRED = "required", "Required: all GPUs on one node"
    PREFERRED = "preferred", "Preferred: one node if possible"
    ANY = "any", "Any: placement does not matter"


class DependencyKind(models.TextChoices):
    """When a job may start after the jobs it depends on (Slurm's --dependency types)."""

    AFTER_OK = "afterok", "After they all succeed"
    AFTER_ANY = "afterany", "After they all end, however"


class Notify(models.TextChoices):
    """When the owner gets an email about the job (Slurm's --mail-type)."""

    NEVER = "", "Never"
    END = "end", "When it ends"
    FAIL = "fail", "If it fails"
    ALL = "all", "When it starts and when it ends"


# The states each choice mails about: ending as a whole, not the requeue of an attempt.
NOTIFY_STATES: dict[str, frozenset[str]] = {
    Notify.NEVER: frozenset(),
    Notify.END: frozenset({"SUCCEEDED", "FAILED", "CANCELLED"}),
    Notify.FAIL: frozenset({"FAILED"}),
    Notify.ALL: frozenset({"RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"}),
}


class EventActor(models.TextChoices):
    USER = "user", "User"
    SCHEDULER = "scheduler", "Scheduler"
    AGENT = "agent", "Node agent"
    SYSTEM = "system", "System"
