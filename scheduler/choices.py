from django.db import models


class RoundOutcome(models.TextChoices):
    APPLIED = "applied", "Applied"
    LOCKED = "locked", "Skipped: another round holds the lock"
    FAILED = "failed", "Failed"


class RoundTrigger(models.TextChoices):
    TIMER = "timer", "Timer"
    EVENT = "event", "Job or node event"
    MANUAL = "manual", "Manual"


# Policies a live cluster may use; srtf/srsf need perfect knowledge (simulator only).
LIVE_POLICIES = ("las", "gittins", "fifo", "fifo-backfill")
