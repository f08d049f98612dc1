"""Forms of the admin pages and the report filters: parse and label input, nothing more.

The rules themselves live in the services (quota values) and in the model
(`SchedulerConfig` validators and `clean()`); a form only turns text into typed values and
shows the errors next to their field.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from django import forms
from django.utils import timezone

from accounts.services import type_quota_field
from config.forms import ConcurrentEditForm
from scheduler.models import SchedulerConfig
from scheduler.policies.fifo import FIFO_IGNORED_SETTINGS
from scheduler.settings_services import EDITABLE_FIELDS

# A longer report would sum more hourly rows than a page should (and a year covers audits).
USAGE_MAX_DAYS = 366
USAGE_DEFAULT_DAYS = 30


class QuotaForm(forms.Form):
    """A user's or group's fair-share weight and limits. Empty limit = no limit."""

    weight = forms.FloatField(
        help_text="Fair-share weight, greater than 0. Twice the weight, twice the entitled share."
    )
    max_gpus = forms.IntegerField(
        required=False,
        min_value=0,
        label="Max GPUs",
        help_text="GPUs in use at once; empty = no limit.",
    )
    max_running_jobs = forms.IntegerField(
        required=False, min_value=0, help_text="Empty = no limit."
    )
    max_pending_jobs = forms.IntegerField(
        required=False, min_value=0, help_text="Empty = no limit."
    )

    def __init__(
        self, *args: Any, type_names: Sequence[str] = (), group: bool = False, **kwargs: Any
    ) -> None:
        """One more input per GPU type in `type_names`: that type's own cap; a group's form
        also has its guarantee."""
        super().__init__(*args, **kwargs)
        if group:
            self.fields["guaranteed_gpus"] = forms.IntegerField(
                required=False,
                min_value=0,
                label="Guaranteed GPUs",
                help_text=(
                    "GPUs the group always gets back when its jobs need them, by preempting "
                    "jobs that borrow beyond their own group's guarantee; at most Max GPUs. "
                    "Empty = no guarantee."
                ),
            )
        for type_name in type_names:
            self.fields[type_quota_field(type_name)] = forms.IntegerField(
                required=False,
                min_value=0,
                label=f"Max {type_name} GPUs",
                help_text=f"{type_name} GPUs in use at once; empty = no limit of its own.",
            )

    def clean_weight(self) -> float:
        weight = self.cleaned_data["weight"]
        if weight <= 0:
            raise forms.ValidationError("The weight must be greater than 0.")
        return weight


def thresholds_text(values: Any) -> str:
    """[3600.0, 36000.0] -> "3600, 36000" (whole numbers without a trailing .0)."""
    if not isinstance(values, list):
        return ""
    parts = []
    for value in values:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        parts.append(str(value))
    return ", ".join(parts)


class ThresholdsField(forms.CharField):
    """Comma-separated numbers -> a list of floats. Order and sign are the model's to judge."""

    def prepare_value(self, value: Any) -> Any:
        return thresholds_text(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[float]:  # type: ignore[override]
        text = super().to_python(value)
        numbers: list[float] = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                number = float(part)
            except ValueError as exc:
                raise forms.ValidationError(
                    f"“{part}” is not a number. Give seconds separated by commas, e.g. 3600, 36000."
                ) from exc
            if number != number or number in (float("inf"), float("-inf")):
                raise forms.ValidationError(f"“{part}” is not a finite number.")
            numbers.append(number)
        return numbers


class SchedulerSettingsForm(ConcurrentEditForm):
    """Every editable knob of `SchedulerConfig`, validated by the model's own rules.

    A ModelForm so that the model's validators and `clean()` run on the form (errors appear
    next to their field); it is never saved: the view hands `changes()` to
    `scheduler_config_update`, which validates again under the row lock and audits.
    """

    queue_thresholds = ThresholdsField(
        required=False,
        label="Queue thresholds (seconds)",
        help_text=(
            "Comma-separated, strictly ascending, positive normalized GPU-seconds between the "
            "Tiresias queues, e.g. 3600, 36000. Empty = one queue."
        ),
    )

    class Meta:
        model = SchedulerConfig
        fields = list(EDITABLE_FIELDS)
        labels = {
            "promote_knob": "Promotion knob",
            "min_runtime_seconds": "Minimum runtime (seconds)",
            "preempt_patience_seconds": "Preemption patience (seconds)",
            "preempt_margin": "Preemption margin (queues)",
            "max_victims": "Victims per waiting job",
            "starvation_seconds": "Starvation guard (seconds)",
            "restore_cost_seconds": "Restore cost (seconds)",
            "allox_alpha": "AlloX alpha",
            "allox_window": "AlloX window",
            "allox_efficiency_gate": "AlloX efficiency gate",
            "round_interval_seconds": "Round interval (seconds)",
            "preemption_grace_seconds": "Preemption grace (seconds)",
            "idle_reap": "Reap idle jobs",
            "idle_threshold_pct": "Idle below (% utilization)",
            "idle_window_minutes": "Idle window (minutes)",
            "idle_grace_minutes": "Idle grace after the warning (minutes)",
            "session_idle_minutes": "Idle window of interactive sessions (minutes)",
        }
        help_texts = {
            "policy": "How pending jobs are ordered: las and gittins are Tiresias "
            "(fair share applies within each queue); fifo serves in arrival order.",
            "placement": "How a started job's GPUs are chosen.",
            "min_runtime_seconds": "A started job is not preempted before it has run this long.",
            "preempt_patience_seconds": "A pending job may preempt others only after waiting "
            "this long since it was last queued; most waits end sooner when a job finishes. "
            "0 = preempt at once.",
            "preempt_margin": "A pending job may preempt only jobs at least this many queues "
            "below its own; 1 = any lower queue (Tiresias).",
            "max_victims": "Running jobs one waiting job may preempt in a round; 0 = no "
            "limit. A starving job is exempt.",
            "starvation_seconds": "A multi-GPU job pending this long is starving: it preempts "
            "without the margin or the victim limit, and while it waits for GPUs no job of a "
            "lower queue starts ahead of it. 0 = off.",
            "restore_cost_seconds": "Seconds of work a preempted job loses each time it "
            "resumes from its checkpoint (used for estimates and by the simulator).",
            "allox_window": "Pending jobs considered per AlloX matching.",
            "allox_efficiency_gate": "While jobs wait for GPUs, each job only takes GPU types "
            "where it makes at least this share of its best value at the queue's prices "
            "(a K80 goes to a model that runs well on it); a running job far below it gives "
            "its GPU to a waiting job that suits it. 0 = off.",
            "round_interval_seconds": "Seconds between timer-triggered scheduling rounds.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            # The model names durations `*_seconds`; the policy's settings drop the unit.
            if {name, name.removesuffix("_seconds")} & FIFO_IGNORED_SETTINGS:
                field.help_text = f"{field.help_text} las and gittins only: fifo ignores it."

    def changes(self) -> dict[str, Any]:
        """The cleaned values of the fields this admin edited, for `scheduler_config_update`."""
        return {field: self.cleaned_data[field] for field in self.edited_fields()}


class UsageRangeForm(forms.Form):
    """?start=YYYY-MM-DD&end=YYYY-MM-DD, both days included; default the last 30 days."""

    start = forms.DateField(required=False, input_formats=["%Y-%m-%d"])
    end = forms.DateField(required=False, input_formats=["%Y-%m-%d"])

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        today = timezone.localdate()
        end: date = data.get("end") or today
        if end > today:
            # Nothing is recorded ahead of today, and the report's end bound is the next
            # midnight: 9999-12-31 overflowed the date type (a 500).
            self.add_error("end", "The end date is after today.")
            return data
        # Clamped at the first day there is: in January of year 1 the default start would
        # overflow the date type (a 500).
        start: date = data.get("start") or date.fromordinal(
            max(end.toordinal() - (USAGE_DEFAULT_DAYS - 1), 1)
        )
        # A range error names a date the user gave: with `start` alone the end is today by
        # default, so the start is what to change.
        end_given = data.get("end") is not None
        too_long = f"At most {USAGE_MAX_DAYS} days per report"
        if end < start and end_given:
            self.add_error("end", "The end date is before the start date.")
        elif end < start:
            self.add_error("start", "The start date is after today.")
        elif (end - start).days + 1 > USAGE_MAX_DAYS and end_given:
            self.add_error("end", f"{too_long}.")
        elif (end - start).days + 1 > USAGE_MAX_DAYS:
            self.add_error("start", f"{too_long} (without an end, it ends today).")
        data["start"], data["end"] = start, end
        return data
