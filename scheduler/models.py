"""The scheduler's stored settings (changed live by admins) and the record of each round."""

from __future__ import annotations

import math
from collections.abc import Collection

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from scheduler.core.types import DEFAULT_QUEUE_THRESHOLDS, PlacementKind

from .choices import LIVE_POLICIES, RoundOutcome, RoundTrigger

# The policies that rank jobs in Tiresias queues and preempt across them; fifo and
# fifo-backfill ignore the queues and the margin.
TIRESIAS_POLICIES = frozenset({"las", "gittins"})


def _default_thresholds() -> list[float]:
    # A fresh list per row: a shared mutable default would leak edits between instances.
    return list(DEFAULT_QUEUE_THRESHOLDS)


# agents.stop waits out the grace over SSH; its Celery time limit is this plus SSH time.
MAX_PREEMPTION_GRACE_SECONDS = 3600
# Upper bounds that keep a typo from switching a mechanism off unnoticed (1e300 s of
# minimum runtime protects every job from preemption for ever).
MAX_DURATION_SECONDS = 30 * 24 * 3600
MAX_ROUND_INTERVAL_SECONDS = 3600
MAX_QUEUE_THRESHOLD = 1e12  # GPU-seconds: 10^12 is 31,700 GPU-years
MAX_IDLE_MINUTES = 30 * 24 * 60


class SchedulerConfig(models.Model):
    """One row (pk=1): every knob of a round. The next round reads the new values."""

    policy = models.CharField(
        max_length=32, default="las", choices=[(name, name) for name in LIVE_POLICIES]
    )
    placement = models.CharField(
        max_length=16,
        default=PlacementKind.ALLOX.value,
        choices=[(kind.value, kind.value) for kind in PlacementKind],
    )
    queue_thresholds = models.JSONField(
        default=_default_thresholds,
        help_text="Ascending GPU-second thresholds between Tiresias queues, e.g. [3600].",
    )
    promote_knob = models.FloatField(
        null=True, blank=True, default=4.0, help_text="Starvation promotion; empty = off."
    )
    # Validators name the field in the admin; the check constraints below guard the table.
    fairness = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="0 = arrival order, 1 = share first.",
    )
    min_runtime_seconds = models.FloatField(
        default=300.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(MAX_DURATION_SECONDS)],
    )
    # Churn control: fine queues make Tiresias preempt often. Patience, margin and the victim
    # limit damp it; the starvation guard bounds how long that can keep a job waiting.
    preempt_patience_seconds = models.FloatField(
        default=600.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(MAX_DURATION_SECONDS)],
        help_text="A waiting job may preempt only after waiting this long; 0 = at once.",
    )
    preempt_margin = models.PositiveIntegerField(
        default=3,
        validators=[MinValueValidator(1)],
        help_text="Queues a victim must be below the waiting job; 1 = any lower queue.",
    )
    max_victims = models.PositiveIntegerField(
        default=1,
        help_text=(
            "Running jobs one waiting job may preempt; 0 = no limit. A starving job is exempt."
        ),
    )
    starvation_seconds = models.FloatField(
        default=3600.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(MAX_DURATION_SECONDS)],
        help_text=(
            "A multi-GPU job pending this long is starving: no margin, no victim limit, "
            "GPUs kept for it; 0 = off."
        ),
    )
    restore_cost_seconds = models.FloatField(
        default=30.0, validators=[MinValueValidator(0.0), MaxValueValidator(MAX_DURATION_SECONDS)]
    )
    allox_alpha = models.FloatField(
        default=0.5,
        validators=[MinValueValidator(0.01), MaxValueValidator(1.0)],
        help_text="Share of users (lowest usage first) whose jobs enter the AlloX matching.",
    )
    allox_window = models.PositiveIntegerField(default=50, validators=[MinValueValidator(1)])
    allox_efficiency_gate = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text=(
            "While jobs wait, a job only takes GPU types where it makes at least this share "
            "of its best value at the queue's prices; 0 = off."
        ),
    )
    round_interval_seconds = models.FloatField(
        default=10.0,
        validators=[MinValueValidator(1.0), MaxValueValidator(MAX_ROUND_INTERVAL_SECONDS)],
    )
    preemption_grace_seconds = models.PositiveIntegerField(
        default=30, help_text="SIGTERM, then this long to checkpoint, then kill."
    )
    # Idle reaping (jobs.idle_services): warn, then a grace, then cancel. Off by default.
    idle_reap = models.BooleanField(
        default=False,
        help_text="Cancel running jobs that leave their GPUs idle, after a warning and a grace.",
    )
    idle_threshold_pct = models.FloatField(
        default=5.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(100.0)],
        help_text="A job whose GPUs average less utilization than this (%) is idle.",
    )
    idle_window_minutes = models.PositiveIntegerField(
        default=60,
        validators=[MinValueValidator(5), MaxValueValidator(MAX_IDLE_MINUTES)],
        help_text="Idle over this long (and having run this long) earns a warning.",
    )
    idle_grace_minutes = models.PositiveIntegerField(
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_IDLE_MINUTES)],
        help_text="After the warning, a job still idle this long is cancelled.",
    )
    # Interactive sessions (jobs.sessions) are not preempted, so an idle one holds its
    # GPUs until its walltime: they are judged on their own window (longer: people think
    # between cells), whether or not batch jobs are reaped. 0 = sessions are not judged.
    session_idle_minutes = models.PositiveIntegerField(
        default=120,
        validators=[MaxValueValidator(MAX_IDLE_MINUTES)],
        help_text="An interactive session idle this long is warned, then cancelled after the "
        "grace (whether or not idle jobs are reaped); 0 = never.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "scheduler settings"
        verbose_name_plural = "scheduler settings"
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="schedulerconfig_singleton"),
            models.CheckConstraint(
                condition=Q(fairness__gte=0) & Q(fairness__lte=1),
                name="schedulerconfig_fairness_0_1",
            ),
            models.CheckConstraint(
                condition=Q(allox_alpha__gt=0) & Q(allox_alpha__lte=1),
                name="schedulerconfig_alpha_0_1",
            ),
            models.CheckConstraint(
                condition=Q(allox_efficiency_gate__gte=0) & Q(allox_efficiency_gate__lte=1),
                name="schedulerconfig_efficiency_gate_0_1",
            ),
            models.CheckConstraint(
                condition=Q(min_runtime_seconds__gte=0) & Q(restore_cost_seconds__gte=0),
                name="schedulerconfig_durations_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(round_interval_seconds__gte=1), name="schedulerconfig_interval_min"
            ),
            models.CheckConstraint(
                condition=Q(preempt_patience_seconds__gte=0) & Q(starvation_seconds__gte=0),
                name="schedulerconfig_churn_durations_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(preempt_margin__gte=1), name="schedulerconfig_preempt_margin_min"
            ),
            models.CheckConstraint(
                condition=Q(idle_threshold_pct__gte=0) & Q(idle_threshold_pct__lte=100),
                name="schedulerconfig_idle_threshold_0_100",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.policy} + {self.placement}"

    def clean_fields(self, exclude: Collection[str] | None = None) -> None:
        # No thresholds ([]) is one queue, a valid setting the settings page offers
        # ("Empty = one queue"), but a JSONField without blank=True refuses an empty list;
        # `clean` checks the list. (Here rather than blank=True: that needs a migration.)
        if self.queue_thresholds == []:
            exclude = {*(exclude or ()), "queue_thresholds"}
        super().clean_fields(exclude=exclude)

    def clean(self) -> None:
        thresholds = self.queue_thresholds
        if not isinstance(thresholds, list) or not all(
            isinstance(value, int | float) and not isinstance(value, bool) for value in thresholds
        ):
            raise ValidationError({"queue_thresholds": "A list of numbers, e.g. [3600, 36000]."})
        # Every comparison with NaN is false, so NaN would pass the checks below (and the
        # admin's JSON input accepts NaN and Infinity), then PostgreSQL's jsonb refuses it.
        if any(isinstance(value, float) and not math.isfinite(value) for value in thresholds):
            raise ValidationError({"queue_thresholds": "Thresholds must be finite numbers."})
        if any(value <= 0 for value in thresholds) or thresholds != sorted(set(thresholds)):
            raise ValidationError(
                {"queue_thresholds": "Thresholds must be positive and strictly ascending."}
            )
        if any(value > MAX_QUEUE_THRESHOLD for value in thresholds):
            raise ValidationError(
                {"queue_thresholds": f"Thresholds must be at most {MAX_QUEUE_THRESHOLD:g} GPU·s."}
            )
        self._clean_float_fields()
        session_idle = self.session_idle_minutes
        if isinstance(session_idle, int) and 0 < session_idle < 5:
            # Half a window's minutes need readings: a 2-minute window judges an image pull.
            raise ValidationError({"session_idle_minutes": "0 (never), or 5 minutes or more."})
        knob = self.promote_knob
        if isinstance(knob, int | float) and not isinstance(knob, bool) and knob < 0:
            raise ValidationError({"promote_knob": "Must be 0 or more (empty or 0 = off)."})
        grace = self.preemption_grace_seconds
        if isinstance(grace, int | float) and grace > MAX_PREEMPTION_GRACE_SECONDS:
            # The stop task waits out the grace; its time limit is sized from this bound.
            raise ValidationError(
                {
                    "preemption_grace_seconds": (
                        f"Must be at most {MAX_PREEMPTION_GRACE_SECONDS} seconds (1 hour)."
                    )
                }
            )

    def clean_warnings(self) -> list[str]:
        """What `clean` lets pass because it may be intended, but that switches a mechanism
        off without saying so: one sentence each, naming the effect (the settings page and
        the admin show them)."""
        warnings = []
        queues = len(self.queue_thresholds) + 1
        if self.policy in TIRESIAS_POLICIES and self.preempt_margin >= queues:
            # A pending job preempts only jobs at least `preempt_margin` queues below its
            # own; with Q queues the widest gap is Q - 1 (policies.las.preemption_classes).
            guard = (
                f"a multi-GPU job pending {self.starvation_seconds:g} s (the starvation guard)"
                if self.starvation_seconds > 0
                else "none at all: the starvation guard is off too"
            )
            remedy = "add thresholds" + (
                f" or lower the margin to {queues - 1}" if queues > 1 else ""
            )
            warnings.append(
                f"The preemption margin ({self.preempt_margin}) is not below the number of "
                f"queues ({queues}, from {len(self.queue_thresholds)} threshold(s)): no "
                "waiting job is ever that many queues above a running one, so preemption "
                f"is off except for {guard}. To preempt across queues, {remedy}."
            )
        return warnings

    def _clean_float_fields(self) -> None:
        """Refuse NaN and infinity in every float setting, naming each such field.

        The min/max validators compare, and every comparison with NaN is false, so NaN
        passed them all (a 500 from the table's check constraints, or a knob that silently
        switches a rule off). A field that failed its own conversion (still text) has its
        error already.
        """
        errors = {
            field.name: "Must be a finite number."
            for field in self._meta.concrete_fields
            if isinstance(field, models.FloatField)
            and isinstance(getattr(self, field.attname), float)
            and not math.isfinite(getattr(self, field.attname))
        }
        if errors:
            raise ValidationError(errors)


class SchedulingRound(models.Model):
    """What one round saw and decided: for the dashboard and for debugging."""

    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField(default=0.0)
    trigger = models.CharField(max_length=16, choices=RoundTrigger.choices)
    outcome = models.CharField(max_length=16, choices=RoundOutcome.choices)
    policy = models.CharField(max_length=32, blank=True)
    settings = models.JSONField(default=dict, blank=True)
    pending_jobs = models.PositiveIntegerField(default=0)
    running_jobs = models.PositiveIntegerField(default=0)
    free_devices = models.PositiveIntegerField(default=0)
    starts = models.PositiveIntegerField(default=0)
    preemptions = models.PositiveIntegerField(default=0)
    holds = models.PositiveIntegerField(default=0)
    queue_changes = models.PositiveIntegerField(default=0)
    dropped = models.JSONField(default=list, blank=True, help_text="Decisions that no longer held.")
    timings_ms = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"round {self.pk} at {self.started_at:%H:%M:%S}: {self.outcome}"


class StartForecast(models.Model):
    """When a pending job is expected to start (`scheduler.forecast_services`).

    The latest forecast is what pages and the API show. The first one that gave a time is
    kept beside it, so that once the job starts the forecast can be scored against what
    happened (`selectors.start_forecast_accuracy`): an estimate with no measured accuracy
    is a guess.
    """

    job = models.OneToOneField(
        "jobs.Job", primary_key=True, on_delete=models.CASCADE, related_name="start_forecast"
    )
    made_at = models.DateTimeField()
    start_at = models.DateTimeField(null=True, blank=True)  # None: no estimate (see `note`)
    # Where past forecasts were scored (`selectors.start_forecast_accuracy`): the range the
    # real start fell in for 80 % of them, scaled to this forecast's wait.
    earliest_at = models.DateTimeField(null=True, blank=True)
    latest_at = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=200, blank=True)
    first_made_at = models.DateTimeField(null=True, blank=True)
    first_start_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["first_made_at"], name="forecast_first_made")]

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.start_at or self.note}"


class StartForecastScore(models.Model):
    """How past start forecasts compared with what happened (one row, pk=1): written by
    every forecast run (`selectors.start_forecast_accuracy`), so that a job's page reads
    it instead of scoring 30 days of forecasts itself. No row: not measured yet."""

    measured_at = models.DateTimeField()
    samples = models.PositiveIntegerField()
    # Real wait / forecast wait of the jobs scored: 10th percentile, median, 90th.
    low = models.FloatField()
    median = models.FloatField()
    high = models.FloatField()

    def __str__(self) -> str:
        return f"{self.samples} forecasts: {self.low:.2f}-{self.high:.2f}x"
