"""Reads for people, tokens and their audit history."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, QuerySet, Sum

from cluster.models import Device

from .models import ApiToken, AuditEntry, LabGroup, User
from .services import GROUP_QUOTA_FIELDS


def api_token_list(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user)


def user_groups(*, user: User) -> QuerySet[LabGroup]:
    return user.lab_groups.all()


def quota_audit_history(*, account: User | LabGroup) -> QuerySet[AuditEntry]:
    """The audit entries of this user's or group's weight and limits, newest first.

    Found by the account's id, not its name: a renamed account keeps its history and a new
    account given a freed name starts without one. Entries without an id (written before
    AuditEntry.target_id, of an account no longer known by that name) belong to no account:
    matching them by name would hand them to whoever holds the name now; the audit log
    still lists them. The account's other audited changes (role, groups, password) are in
    the audit log, not here.
    """
    kinds = AuditEntry.TargetKind
    kind = kinds.USER if isinstance(account, User) else kinds.GROUP
    return AuditEntry.objects.filter(
        # A GPU type's own cap is the field "max_gpus[<type>]" (services.type_quota_field).
        Q(field__in=GROUP_QUOTA_FIELDS) | Q(field__startswith="max_gpus["),
        target_kind=kind,
        target_id=account.pk,
    )


@dataclass(frozen=True)
class GuaranteesSummary:
    total: int  # the groups' guaranteed GPUs added up
    gpus: int  # GPUs in the cluster (not retired; drained and cordoned ones too)


def guarantees_summary() -> GuaranteesSummary:
    """How much of the cluster the groups' guarantees promise: more than it has is allowed
    (nodes come and go) but means not every group can get its whole guarantee at once."""
    total = LabGroup.objects.aggregate(total=Sum("guaranteed_gpus"))["total"] or 0
    return GuaranteesSummary(total=total, gpus=Device.objects.count())
