"""Aggregates the dashboard reads, maintained by the periodic `dashboard.aggregates_update`.

Pages never scan the job or sample history: each figure reads one of these small tables
(style.md rule 24), so a page costs the same with 100 or 100,000 finished jobs.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class UsageHour(models.Model):
    """Device time held in one hour by one user, charged to one group, on one device type.

    Hours are those of the lab's time zone (settings.TIME_ZONE, `dashboard.services.
    floor_hour`), so a local day is a whole number of rows, also where local midnight falls
    at half past a UTC hour. Rebuilt for every hour that may still change (see
    `dashboard.services`), so closed hours are final and the current hour is always up to
    date as of the last task run.
    """

    hour = models.DateTimeField(help_text="Start of the hour, in the lab's time zone.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    group = models.ForeignKey(
        "accounts.LabGroup", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    device_type = models.ForeignKey(
        "cluster.DeviceType", on_delete=models.CASCADE, related_name="+"
    )
    gpu_seconds = models.FloatField(help_text="Wall-clock seconds × devices held.")
    service = models.FloatField(help_text="GPU-seconds normalized by device-type speed.")

    class Meta:
        ordering = ["-hour"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "user", "group", "device_type"],
                name="usagehour_unique",
                nulls_distinct=False,
            ),
        ]
        indexes = [models.Index(fields=["hour"], name="usagehour_hour")]

    def __str__(self) -> str:
        return f"{self.user_id}/{self.group_id} {self.hour:%Y-%m-%d %H}h"


class QueueSample(models.Model):
    """Pending jobs (and the GPUs they ask for) in one Tiresias queue level at one moment."""

    at = models.DateTimeField()
    level = models.PositiveSmallIntegerField()
    pending_jobs = models.PositiveIntegerField()
    pending_gpus = models.PositiveIntegerField()

    class Meta:
        ordering = ["-at", "level"]
        indexes = [models.Index(fields=["at"], name="queuesample_at")]

    def __str__(self) -> str:
        return f"queue {self.level} at {self.at:%H:%M}: {self.pending_jobs}"


class UtilizationSample(models.Model):
    """One device type at one moment: how many devices exist, are allocated, are used.

    `used` is the sum of utilization fractions of that type's devices (two GPUs at 50%
    count as one GPU used), from the latest heartbeat of each device. `used_allocated` is
    the same sum over the devices a job holds right now (those `allocated` counts), so
    "used of allocated" is not credited with a free GPU's load, a cancelled job's process
    still stopping, or work started outside gpulab.
    """

    at = models.DateTimeField()
    device_type = models.ForeignKey(
        "cluster.DeviceType", on_delete=models.CASCADE, related_name="+"
    )
    devices = models.PositiveIntegerField()
    # Not cordoned either (`dashboard.services._utilization_sample`).
    schedulable = models.PositiveIntegerField(help_text="Devices on UP nodes.")
    allocated = models.PositiveIntegerField()
    used = models.FloatField()
    used_allocated = models.FloatField(
        null=True,
        blank=True,
        help_text="Use summed over the allocated devices only; null: sampled before it was.",
    )

    class Meta:
        ordering = ["-at", "device_type_id"]
        indexes = [models.Index(fields=["at"], name="utilsample_at")]

    def __str__(self) -> str:
        return f"{self.device_type_id} at {self.at:%H:%M}: {self.allocated}/{self.devices}"


class DeviceUtilizationBucket(models.Model):
    """One device's mean utilization over a 15-minute bucket (the 24 h heatmap's cells)."""

    device = models.ForeignKey("cluster.Device", on_delete=models.CASCADE, related_name="+")
    start = models.DateTimeField()
    utilization_avg = models.FloatField(null=True)
    samples = models.PositiveIntegerField()

    class Meta:
        ordering = ["-start", "device_id"]
        constraints = [
            models.UniqueConstraint(fields=["device", "start"], name="deviceutilbucket_unique"),
            models.CheckConstraint(
                condition=Q(utilization_avg__isnull=True)
                | (Q(utilization_avg__gte=0) & Q(utilization_avg__lte=100)),
                name="deviceutilbucket_pct_range",
            ),
        ]
        indexes = [models.Index(fields=["start"], name="deviceutilbucket_start")]

    def __str__(self) -> str:
        return f"device {self.device_id} {self.start:%Y-%m-%d %H:%M}"


class AggregatesState(models.Model):
    """Singleton (pk=1): how far the aggregates have been brought, so each run is incremental.

    `version` changes on every run: figures built only from aggregates are cached under it,
    so a cached figure is exactly what a fresh build would give until the next run.
    """

    usage_rebuilt_from = models.DateTimeField(
        null=True, blank=True, help_text="Hours before this one are final."
    )
    usage_time_zone = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text=(
            "The time zone whose hours the usage rows follow; a zone with other hour starts"
            " re-slices them, keeping their rates."
        ),
    )
    updated_at = models.DateTimeField(null=True, blank=True)
    last_duration_ms = models.FloatField(default=0.0)
    version = models.UUIDField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(pk=1), name="aggregatesstate_singleton")]

    def __str__(self) -> str:
        return f"aggregates as of {self.updated_at}"
