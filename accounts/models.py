"""People, lab groups, their fairness weights and quotas, and API tokens.

Its own app because three others use it: `jobs` checks quotas at submission, the
scheduler reads weights and quotas every round, and the dashboard reports usage per
user and group. A quota of NULL means "no limit".
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth.models import AbstractUser, UserManager
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone
from django.utils.functional import cached_property

from .choices import Role


def webhook_url_validate(url: str) -> None:
    """What URLValidator lets through but no request could use: a port beyond 65535."""
    try:
        urlsplit(url).port  # noqa: B018 (reading it is the check: it raises out of range)
    except ValueError as exc:
        raise ValidationError("Enter a valid URL: the port must be 0 to 65535.") from exc


class QuotaFields(models.Model):
    """Fair-share weight and hard limits, shared by users and groups."""

    weight = models.FloatField(default=1.0, help_text="Fair-share weight; larger gets more.")
    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="GPUs in use at once.")
    max_running_jobs = models.PositiveIntegerField(null=True, blank=True)
    max_pending_jobs = models.PositiveIntegerField(null=True, blank=True)
    # Fair-share usage: normalized GPU-seconds, decayed with the configured half-life as
    # of `usage_updated_at`. Written when a job gives its devices back (jobs.services).
    usage = models.FloatField(default=0.0)
    usage_updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class LabGroup(QuotaFields):
    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)
    members = models.ManyToManyField("accounts.User", related_name="lab_groups", blank=True)
    # Kueue's nominal quota: GPUs the group gets back, by preempting jobs that borrow beyond
    # their own group's guarantee, whenever its jobs need them (scheduler/policies/
    # guarantees.py). `max_gpus` stays the hard cap, so max_gpus - guaranteed_gpus is what
    # the group may borrow. NULL: no guarantee; everything the group runs is borrowed.
    guaranteed_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="GPUs the group can always get back (preempting borrowed ones).",
    )
    # Slurm's account coordinators (a PI, a TA): they see and cancel the jobs charged to
    # this group and keep them from idle reaping. Not necessarily members: a PI who never
    # submits still coordinates. Powers over accounts and quotas stay with lab admins.
    coordinators = models.ManyToManyField(
        "accounts.User",
        related_name="coordinated_groups",
        blank=True,
        help_text="See and cancel every job charged to this group.",
    )
    # The group's own chat channel (Slack, Mattermost, any JSON webhook): hears when the
    # group's jobs start and end (jobs.webhooks). Set by a lab admin only: the
    # control plane posts to it, so a user must not choose where.
    webhook_url = models.URLField(
        max_length=500,
        blank=True,
        validators=[URLValidator(schemes=["http", "https"]), webhook_url_validate],
        help_text="Incoming-webhook URL told when this group's jobs start and end.",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(weight__gt=0), name="labgroup_weight_positive"),
            models.CheckConstraint(
                condition=Q(guaranteed_gpus__isnull=True)
                | Q(max_gpus__isnull=True)
                | Q(guaranteed_gpus__lte=F("max_gpus")),
                name="labgroup_guarantee_within_cap",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class LabUserManager(UserManager):
    def create_superuser(self, username, email=None, password=None, **extra_fields):  # type: ignore[no-untyped-def,override]
        """`manage.py createsuperuser` makes a lab admin: powers follow the role (User.save)."""
        extra_fields.setdefault("role", Role.ADMIN)
        return super().create_superuser(username, email, password, **extra_fields)


class User(AbstractUser, QuotaFields):
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.STUDENT)
    default_group = models.ForeignKey(
        LabGroup,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The group a job is charged to when the submission names none.",
    )

    objects = LabUserManager()

    class Meta:
        ordering = ["username"]
        constraints = [
            models.CheckConstraint(condition=Q(weight__gt=0), name="user_weight_positive"),
            models.CheckConstraint(
                condition=Q(role__in=[choice.value for choice in Role]), name="user_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.username

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The role is the one source of a user's powers. Django's admin and permission
        # checks read is_staff/is_superuser, so they are derived from the role on every
        # save (admin form, shell, createsuperuser, services alike) rather than kept in
        # step by each caller: a demoted admin once kept is_superuser and every admin page.
        is_admin = self.role == Role.ADMIN
        self.is_staff = self.is_superuser = is_admin
        update_fields = kwargs.get("update_fields")
        if update_fields is not None and "role" in update_fields:
            kwargs["update_fields"] = {*update_fields, "is_staff", "is_superuser"}
        super().save(*args, **kwargs)

    @property
    def is_lab_admin(self) -> bool:
        return self.role == Role.ADMIN

    @cached_property
    def coordinated_group_ids(self) -> frozenset[int]:
        """The lab groups this person coordinates (LabGroup.coordinators). Read once per
        instance: `request.user` lives for one request, so a page or an API call asks once
        however often it checks."""
        if self.pk is None:
            return frozenset()
        return frozenset(self.coordinated_groups.values_list("pk", flat=True))

    @property
    def sees_others_jobs(self) -> bool:
        """Whether some job this person sees may be someone else's: an admin's view, or a
        coordinator's (their groups' jobs). Pages show an Owner column then."""
        return self.is_lab_admin or bool(self.coordinated_group_ids)


class DeviceTypeQuota(models.Model):
    """A per-device-type GPU cap for one user or one group (exactly one of them)."""

    user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.CASCADE, related_name="type_quotas"
    )
    group = models.ForeignKey(
        LabGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="type_quotas"
    )
    device_type = models.ForeignKey("cluster.DeviceType", on_delete=models.CASCADE)
    max_gpus = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(user__isnull=False) & Q(group__isnull=True))
                | (Q(user__isnull=True) & Q(group__isnull=False)),
                name="typequota_exactly_one_owner",
            ),
            models.UniqueConstraint(
                fields=["user", "device_type"], name="typequota_unique_per_user"
            ),
            models.UniqueConstraint(
                fields=["group", "device_type"], name="typequota_unique_per_group"
            ),
        ]

    def __str__(self) -> str:
        owner = self.user or self.group
        return f"{owner}: max {self.max_gpus} × {self.device_type}"


class ApiToken(models.Model):
    """A named API token. Only a SHA-256 digest is stored; the key is shown once."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=64)
    prefix = models.CharField(max_length=12, help_text="First characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.user}: {self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class AuditEntry(models.Model):
    """One changed field of a user's or group's quota or account (role, active, lab groups,
    password set by an admin), of the scheduler settings, or of a node, device or token an
    admin acted on.

    Written by the services that make those changes, one row per changed field, in the same
    transaction as the change. The actor's name is copied so the log still reads after the
    account is deleted (the foreign key then becomes NULL).
    """

    class TargetKind(models.TextChoices):
        USER = "user", "User"
        GROUP = "group", "Group"
        SCHEDULER = "scheduler", "Scheduler"
        # An admin's action on the cluster: a drain or undrain (field `state`, or
        # `return_state` for a DOWN node, the reason after the new value), a GPU's
        # retirement, a node agent token's revocation.
        NODE = "node", "Node"
        DEVICE = "device", "Device"
        AGENT_TOKEN = "agent_token", "Agent token"
        # An admin revoking a user's API token (the user revoking their own is not logged):
        # named by its owner, the token itself in the new value.
        API_TOKEN = "api_token", "API token"

    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_username = models.CharField(max_length=150, blank=True)
    target_kind = models.CharField(max_length=16, choices=TargetKind.choices)
    target_name = models.CharField(max_length=150)
    # The id of the user or lab group the entry is about (kinds user, group, api_token: its
    # owner), so an account's history follows the account through a rename and a new
    # account given a freed name does not inherit it. `target_name` is kept for display
    # and for the log of a deleted account. NULL for the other kinds, and for entries
    # written before this field whose name matched no account (migration 0006).
    target_id = models.BigIntegerField(null=True, blank=True)
    field = models.CharField(max_length=64)
    # Text, not JSON: values of any field (numbers, lists, "no limit") read the same here.
    old_value = models.TextField(blank=True)
    new_value = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["-at", "-id"], name="auditentry_at"),
            models.Index(fields=["target_kind", "-at", "-id"], name="auditentry_kind_at"),
            models.Index(
                fields=["target_kind", "target_id", "-at", "-id"], name="auditentry_target_at"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.actor_username}: {self.target_kind} {self.target_name}.{self.field}"
