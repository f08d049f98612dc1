"""Nodes, their devices, and device types with an admin-set relative speed."""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from .choices import DeviceKind, NodeState, Runtime

# Device-type speeds an admin may set. Service is seconds × GPUs × speed: a speed near
# the float limit (1e308) overflows it to inf, and inf - inf is NaN in every later round;
# a subnormal one (1e-320) makes AlloX's cost matrix infeasible. Real ratios between GPU
# generations are well inside these bounds.
SPEED_MIN = 0.001
SPEED_MAX = 1000.0
SPEED_RANGE_TEXT = f"Enter a relative speed from {SPEED_MIN:g} to {SPEED_MAX:g} (reference 1.0)."


def validate_speed(value: float) -> None:
    """Field-level twin of the `devicetype_speed_range` constraint, so a form names `speed`."""
    if not (math.isfinite(value) and SPEED_MIN <= value <= SPEED_MAX):
        raise ValidationError(SPEED_RANGE_TEXT, code="speed_range")


class DeviceType(models.Model):
    """A class of interchangeable devices, e.g. `a100`. Speed is relative to 1.0."""

    name = models.SlugField(max_length=32, unique=True)
    display_name = models.CharField(max_length=64, blank=True)
    speed = models.FloatField(
        default=1.0,
        validators=[validate_speed],
        help_text=f"Relative speed (reference 1.0, from {SPEED_MIN:g} to {SPEED_MAX:g}). "
        "Attained service is normalized by it.",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(speed__gte=SPEED_MIN) & Q(speed__lte=SPEED_MAX),
                name="devicetype_speed_range",
                violation_error_message=SPEED_RANGE_TEXT,
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    address = models.CharField(max_length=255, help_text="Host name or IP for SSH.")
    # The validators name the field in forms; the constraint below guards every other path.
    ssh_port = models.PositiveIntegerField(
        default=22, validators=[MinValueValidator(1), MaxValueValidator(65535)]
    )
    ssh_user = models.CharField(max_length=64, default="gpulab")
    runtime = models.CharField(max_length=16, choices=Runtime.choices, default=Runtime.DOCKER)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.UP)
    state_reason = models.CharField(max_length=255, blank=True)
    # Set when a node is taken DOWN (silence, a launch that gave up): the state it returns
    # to once it answers again (an admin's drain survives an outage). An admin's drain or
    # undrain while it is DOWN sets it to DRAINED or UP (Slurm's DOWN+DRAIN). Empty when
    # nothing offered a way back: then heartbeats alone do not bring the node back.
    return_state = models.CharField(max_length=16, choices=NodeState.choices, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    simulated = models.BooleanField(
        default=False, help_text="Demo node: a simulated agent runs its jobs."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=[choice.value for choice in NodeState]),
                name="node_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(ssh_port__gte=1) & Q(ssh_port__lte=65535), name="node_ssh_port_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class InServiceDeviceManager(models.Manager["Device"]):
    """Devices still in a node: every query that schedules, launches or draws uses this."""

    def get_queryset(self) -> models.QuerySet[Device]:
        return super().get_queryset().filter(retired_at__isnull=True)


class Device(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveSmallIntegerField(help_text="Index on the node (nvidia-smi order).")
    uuid = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=8, choices=DeviceKind.choices, default=DeviceKind.GPU)
    model_name = models.CharField(max_length=128, blank=True)
    device_type = models.ForeignKey(DeviceType, on_delete=models.PROTECT, related_name="devices")
    memory_mb = models.PositiveIntegerField(default=0)
    retired_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When another GPU took this one's slot; a retired GPU is never scheduled "
        "and keeps its history. Cleared if it is reported again.",
    )
    # An admin took this one GPU out of service (a sick GPU, where draining the node would
    # idle its healthy ones too): no new job starts on it; a job running there finishes.
    # Its hardware faults no longer drain the node (`agents.heartbeats`).
    cordoned_at = models.DateTimeField(null=True, blank=True)
    cordon_reason = models.CharField(max_length=255, blank=True)

    # The default manager hides retired devices (related managers such as node.devices use
    # it too); `all_objects` finds them, e.g. a GPU put back into a node.
    objects = InServiceDeviceManager()
    all_objects = models.Manager()  # noqa: DJ012 (ruff takes the manager above for a field)

    class Meta:
        ordering = ["node__name", "index"]
        base_manager_name = "all_objects"  # a sample's or allocation's device, even retired
        constraints = [
            models.UniqueConstraint(
                fields=["node", "index"],
                condition=Q(retired_at__isnull=True),
                name="device_unique_index_per_node",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/{self.index} ({self.device_type})"
