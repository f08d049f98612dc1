"""Writes of the scheduler's stored settings by an admin, with the audit log.

Separate from `scheduler.services` (the round itself): changing a knob is an admin action
that must be validated and audited, while a round only ever reads the settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from accounts.models import AuditEntry, User
from accounts.services import audit_entries_write
from config.errors import ValidationFailed

from .selectors import scheduler_config_locked

# Every knob an admin may change here, in the order the settings page shows them.
EDITABLE_FIELDS = (
    "policy",
    "placement",
    "queue_thresholds",
    "promote_knob",
    "fairness",
    "min_runtime_seconds",
    "preempt_patience_seconds",
    "preempt_margin",
    "max_victims",
    "starvation_seconds",
    "restore_cost_seconds",
    "allox_alpha",
    "allox_window",
    "allox_efficiency_gate",
    "round_interval_seconds",
    "preemption_grace_seconds",
    "idle_reap",
    "idle_threshold_pct",
    "idle_window_minutes",
    "idle_grace_minutes",
    "session_idle_minutes",
)
AUDIT_TARGET_NAME = "scheduler settings"


def scheduler_config_update(*, actor: User, changes: Mapping[str, Any]) -> list[AuditEntry]:
    """Change scheduler settings; the next round reads them. Returns the audit entries written.

    1. Only lab admins may (PermissionDenied otherwise); unknown fields are refused.
    2. The settings row is locked and the new values checked by the model itself (field
       types, choices, validators and `SchedulerConfig.clean`, e.g. ascending thresholds):
       any error raises ValidationFailed naming the field, and nothing is saved.
    3. Only the fields whose value differs are written, with one audit entry each.
    """
    if not actor.is_lab_admin:
        raise PermissionDenied("Only lab admins change the scheduler settings.")
    unknown = sorted(set(changes) - set(EDITABLE_FIELDS))
    if unknown:
        raise ValidationFailed(
            {field: ["Unknown or read-only scheduler setting."] for field in unknown}
        )
    with transaction.atomic():
        config = scheduler_config_locked()
        old = {field: getattr(config, field) for field in EDITABLE_FIELDS}
        for field, value in changes.items():
            setattr(config, field, value)
        try:
            # full_clean converts each value to its field's type (e.g. "0.5" -> 0.5) before
            # comparing, so an unchanged value given as text is not logged as a change.
            config.full_clean(exclude=["updated_at"], validate_unique=False)
        except ValidationError as exc:
            raise ValidationFailed(
                {field: list(messages) for field, messages in exc.message_dict.items()}
            ) from exc
        changed = {
            field: (old[field], getattr(config, field))
            for field in changes
            if getattr(config, field) != old[field]
        }
        if not changed:
            return []
        config.save(update_fields=[*changed, "updated_at"])
        return audit_entries_write(
            actor=actor,
            target_kind=AuditEntry.TargetKind.SCHEDULER,
            target_name=AUDIT_TARGET_NAME,
            changes=changed,
        )
