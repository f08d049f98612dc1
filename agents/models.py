"""The control plane's known-hosts store: SSH host keys of nodes, approved by an admin."""

from __future__ import annotations

from django.conf import settings
from django.db import models

# PostgreSQL's `integer`: a heartbeat's memory, counters and ids past it were a 500.
PG_INT_MAX = 2**31 - 1


class NodeHostKey(models.Model):
    """One host key a node presented. Only an approved key is trusted for SSH.

    The first key a node shows is recorded unapproved and the connection refused, so an
    admin compares its fingerprint with the node's own (`ssh-keygen -lf`) before any job
    runs there. A key that differs from the approved one is recorded the same way.
    """

    node = models.ForeignKey("cluster.Node", on_delete=models.CASCADE, related_name="host_keys")
    key_type = models.CharField(max_length=64)
    key_base64 = models.TextField()
    fingerprint = models.CharField(max_length=128, help_text="SHA256:… as ssh-keygen -l prints.")
    first_seen_at = models.DateTimeField(auto_now_add=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node__name", "-first_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "key_type", "key_base64"], name="nodehostkey_unique_key_per_node"
            ),
        ]

    def __str__(self) -> str:
        status = "approved" if self.approved else "pending"
        return f"{self.node_id} {self.key_type} {self.fingerprint} ({status})"

    @property
    def approved(self) -> bool:
        return self.approved_at is not None


class NodeAgentToken(models.Model):
    """The secret a node's agent sends with each heartbeat; only its SHA-256 is stored."""

    node = models.ForeignKey("cluster.Node", on_delete=models.CASCADE, related_name="agent_tokens")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node__name", "-created_at"]

    def __str__(self) -> str:
        return f"agent token of node {self.node_id}"


class GpuSample(models.Model):
    """One GPU's readings in one heartbeat. Kept 24 h (raw), then only as GpuMinute."""

    device = models.ForeignKey("cluster.Device", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    utilization_pct = models.PositiveSmallIntegerField(null=True)
    memory_used_mb = models.PositiveIntegerField()
    memory_total_mb = models.PositiveIntegerField()
    temperature_c = models.SmallIntegerField(null=True)
    power_w = models.FloatField(null=True)
    ecc_uncorrected = models.PositiveIntegerField(null=True, help_text="Volatile count.")
    xid_errors = models.JSONField(default=list, blank=True, help_text="Xid codes since last.")

    class Meta:
        ordering = ["-at"]
        indexes = [
            models.Index(fields=["device", "at"], name="gpusample_device_at"),
            models.Index(fields=["at"], name="gpusample_at"),
        ]

    def __str__(self) -> str:
        return f"device {self.device_id} at {self.at:%Y-%m-%d %H:%M:%S}"


class JobGpuSample(models.Model):
    """What one job used of one GPU in one heartbeat (use, apart from allocation)."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    attempt = models.PositiveIntegerField()
    device = models.ForeignKey("cluster.Device", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    utilization_pct = models.PositiveSmallIntegerField(null=True)
    memory_used_mb = models.PositiveIntegerField()

    class Meta:
        ordering = ["-at"]
        indexes = [
            models.Index(fields=["job", "at"], name="jobgpusample_job_at"),
            models.Index(fields=["at"], name="jobgpusample_at"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} on device {self.device_id} at {self.at:%H:%M:%S}"


class GpuMinute(models.Model):
    """Per-minute roll-up of GpuSample, kept 30 days."""

    device = models.ForeignKey("cluster.Device", on_delete=models.CASCADE, related_name="+")
    minute = models.DateTimeField()
    samples = models.PositiveIntegerField()
    utilization_avg = models.FloatField(null=True)
    memory_used_max_mb = models.PositiveIntegerField()
    temperature_max_c = models.SmallIntegerField(null=True)
    power_avg_w = models.FloatField(null=True)

    class Meta:
        ordering = ["-minute"]
        constraints = [
            models.UniqueConstraint(fields=["device", "minute"], name="gpuminute_unique"),
        ]
        indexes = [models.Index(fields=["minute"], name="gpuminute_minute")]

    def __str__(self) -> str:
        return f"device {self.device_id} {self.minute:%Y-%m-%d %H:%M}"


class JobGpuMinute(models.Model):
    """Per-minute roll-up of JobGpuSample, kept 30 days."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    device = models.ForeignKey("cluster.Device", on_delete=models.CASCADE, related_name="+")
    minute = models.DateTimeField()
    samples = models.PositiveIntegerField()
    utilization_avg = models.FloatField(null=True)
    memory_used_max_mb = models.PositiveIntegerField()

    class Meta:
        ordering = ["-minute"]
        constraints = [
            models.UniqueConstraint(fields=["job", "device", "minute"], name="jobgpuminute_unique"),
        ]
        indexes = [models.Index(fields=["minute"], name="jobgpuminute_minute")]

    def __str__(self) -> str:
        return f"job {self.job_id} device {self.device_id} {self.minute:%Y-%m-%d %H:%M}"


class JobProgress(models.Model):
    """What one attempt of a job reported of its own progress, for its speed on a type.

    A job that writes its cumulative work count (steps, samples: any unit proportional to
    work) to `$GPULAB_PROGRESS_FILE` has it read by the node agent at every heartbeat. The
    first and the latest reading of an attempt give its rate on the attempt's device type;
    rates across types are what AlloX placement needs (`agents.selectors.measured_rates`).
    One row per attempt, updated in place: the rate needs only the two ends.
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    attempt = models.PositiveIntegerField()
    # Null when the attempt's devices span several types: its rate belongs to none of them.
    device_type = models.ForeignKey(
        "cluster.DeviceType", null=True, on_delete=models.CASCADE, related_name="+"
    )
    first_progress = models.FloatField()
    first_at = models.DateTimeField()
    last_progress = models.FloatField()
    last_at = models.DateTimeField()

    class Meta:
        ordering = ["-last_at"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="jobprogress_one_per_attempt"),
        ]
        indexes = [models.Index(fields=["-last_at"], name="jobprogress_last_at")]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.last_progress:g}"


class AttemptLog(models.Model):
    """The tail of one finished attempt's stdout and stderr, copied from its node.

    Copied once the attempt ended and its GPUs were released (`agents.node_logs_archive`,
    every minute), and again before the node removes the attempt
    (GPULAB_FINISHED_ATTEMPT_KEEP_DAYS) if that copy was missed. The job page and the API
    then show an ended attempt's log from here, without SSH: also after the node removed
    it, and while the node is down. Each stream keeps as much as a live read shows
    (`agents.runtimes.LOG_TAIL_BYTES`), so a row holds about 128 KiB at most.
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    attempt = models.PositiveIntegerField()
    stdout = models.TextField(blank=True)
    stderr = models.TextField(blank=True)
    # False: the node no longer had the attempt when it was copied (removed by hand, or
    # a node reinstalled); both streams are then empty.
    found = models.BooleanField(default=True)
    archived_at = models.DateTimeField()

    class Meta:
        ordering = ["-archived_at"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="attemptlog_one_per_attempt"),
        ]

    def __str__(self) -> str:
        return f"log of job {self.job_id} attempt {self.attempt}"
