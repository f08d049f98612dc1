"""Writes for people, their API tokens, and their quotas (with the audit log)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from cluster.models import DeviceType
from config.errors import NotFound, ValidationFailed

from .choices import Role
from .models import ApiToken, AuditEntry, DeviceTypeQuota, LabGroup, User

TOKEN_PREFIX = "gpl_"


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    """Create a token and return it with its key; the key is never stored nor shown again."""
    name = name.strip()
    if not name:
        raise ValidationFailed({"name": ["Give the token a name, e.g. 'laptop'."]})
    if len(name) > 64:
        raise ValidationFailed({"name": ["At most 64 characters."]})
    key = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=key[: len(TOKEN_PREFIX) + 6], digest=token_digest(key)
    )
    return token, key


def api_token_revoke(*, user: User, token_id: int) -> ApiToken:
    """Revoke one of the user's own tokens (idempotent)."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(pk=token_id, user=user).first()
        if token is None:
            raise NotFound("No such token.")
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
    return token


def api_tokens_revoke(*, actor: User, token_ids: Iterable[int]) -> int:
    """An admin revokes these API tokens (the Django admin's action); return how many were
    revoked now.

    Each one revoked now gets an audit entry named by its owner, in the same transaction,
    as node agent tokens do (agents.heartbeats.node_agent_tokens_revoke). Tokens already
    revoked keep their time, are not counted and get no entry. A user revoking their own
    token (api_token_revoke) is not logged: it is not an admin's action on their account.
    """
    if not actor.is_lab_admin:
        raise PermissionDenied("Only lab admins revoke other users' tokens.")
    now = timezone.now()
    with transaction.atomic():
        # Locked (tokens only, not their owners) so that two admins revoking at once
        # count, and log, each token once.
        tokens = list(
            ApiToken.objects.select_for_update(of=("self",))
            .select_related("user")
            .filter(pk__in=list(token_ids), revoked_at__isnull=True)
            .order_by("pk")
        )
        ApiToken.objects.filter(pk__in=[token.pk for token in tokens]).update(revoked_at=now)
        for token in tokens:
            audit_entries_write(
                actor=actor,
                target_kind=AuditEntry.TargetKind.API_TOKEN,
                target_name=token.user.username,
                target_id=token.user_id,
                changes={"revoked_at": ("", f"token '{token.name}' ({token.prefix}…)")},
            )
    return len(tokens)


def user_create(
    *,
    username: str,
    password: str,
    role: Role = Role.STUDENT,
    email: str = "",
    groups: list[LabGroup] | None = None,
) -> User:
    """Create a lab member; admins get Django-admin access (User.save derives it from the
    role), students do not."""
    with transaction.atomic():
        user = User.objects.create_user(
            username=username, password=password, email=email, role=role
        )
        for group in groups or []:
            group.members.add(user)
        if groups:
            user.default_group = groups[0]
            user.save(update_fields=["default_group"])
    return user


def default_group_errors(
    *, default_group: LabGroup | None, groups: Iterable[LabGroup]
) -> dict[str, list[str]]:
    """Why `default_group` cannot be the default of a member of `groups` ({} if it can).

    A default group the user is not in charges their jobs to no group at all (job_submit
    uses the default only while the user still belongs to it).
    """
    if default_group is None or default_group in set(groups):
        return {}
    return {
        "default_group": [
            f"{default_group.name} is not one of this user's lab groups: "
            "add the user to it, or choose one of their groups."
        ]
    }


def user_lab_groups_set(
    *,
    user: User,
    groups: Iterable[LabGroup],
    default_group: LabGroup | None,
    actor: User | None = None,
) -> list[AuditEntry]:
    """Make `groups` exactly the user's lab groups and `default_group` their default.

    ValidationFailed (naming `default_group`) if the default is not among the groups;
    nothing is written then. An admin's change (`actor`) is audited on the user: the group
    names before and after, and the default group if it changed; a script's, without an
    actor, is not. Returns the entries written.
    """
    groups = list(groups)
    errors = default_group_errors(default_group=default_group, groups=groups)
    if errors:
        raise ValidationFailed(errors)
    with transaction.atomic():
        # The row lock orders two admins' edits, so each entry's "before" is what the
        # other left.
        stored = (
            User.objects.select_for_update(no_key=True, of=("self",))
            .select_related("default_group")
            .get(pk=user.pk)
        )
        changes: dict[str, tuple[Any, Any]] = {}
        names_before = sorted(stored.lab_groups.values_list("name", flat=True))
        names_after = sorted(group.name for group in groups)
        if names_before != names_after:
            changes["lab_groups"] = (names_before, names_after)
        user.lab_groups.set(groups)
        if stored.default_group_id != (default_group.pk if default_group else None):
            changes["default_group"] = (
                _group_name(stored.default_group),
                _group_name(default_group),
            )
        if user.default_group_id != (default_group.pk if default_group else None):
            user.default_group = default_group
            user.save(update_fields=["default_group"])
        if actor is None or not changes:
            return []
        return audit_entries_write(
            actor=actor,
            target_kind=AuditEntry.TargetKind.USER,
            target_name=user.username,
            target_id=user.pk,
            changes=changes,
        )


def _group_name(group: LabGroup | None) -> str | None:
    return None if group is None else group.name


def _user_audited_values(user: User) -> dict[str, Any]:
    """What the audit log records of an admin's edit of an account, besides quotas (their
    own services) and lab groups (user_lab_groups_set): who the user is, what they may do,
    and where their jobs are charged by default. Names and e-mail are not powers."""
    return {
        "username": user.username,
        "role": user.role,
        "is_active": user.is_active,
        "default_group": _group_name(user.default_group),
    }


# What the Django admin's user page edits, and so all that saving it writes: `user` was
# read before the row lock, and its usage (charged as jobs end), quotas (/manage/quotas/)
# and password (its own page) may have changed since. User.save adds is_staff and
# is_superuser, derived from the role.
USER_ACCOUNT_FIELDS = (
    "username",
    "first_name",
    "last_name",
    "email",
    "is_active",
    "role",
    "default_group",
    "last_login",
    "date_joined",
)
# The group page's own fields, likewise (members and coordinators: lab_group_members_set).
LAB_GROUP_FIELDS = ("name", "description", "webhook_url")


def user_account_save(*, actor: User, user: User) -> list[AuditEntry]:
    """Save an admin's edit of a user (`user` holds the new values, as the Django admin's
    form left them) and audit the change of each `_user_audited_values` field, old -> new, in
    the same transaction. A new user gets one entry: its role.

    Only lab admins may (PermissionDenied otherwise). Returns the entries written.
    """
    if not actor.is_lab_admin:
        raise PermissionDenied("Only lab admins change accounts.")
    with transaction.atomic():
        if user.pk is None:
            user.save()
            changes: dict[str, tuple[Any, Any]] = {"role": ("", user.role)}
        else:
            # Locked while compared, so two admins' saves are logged in the order they land.
            stored = (
                User.objects.select_for_update(no_key=True, of=("self",))
                .select_related("default_group")
                .get(pk=user.pk)
            )
            before = _user_audited_values(stored)
            after = _user_audited_values(user)
            changes = {
                field: (before[field], after[field])
                for field in before
                if before[field] != after[field]
            }
            user.save(update_fields=USER_ACCOUNT_FIELDS)
        return audit_entries_write(
            actor=actor,
            target_kind=AuditEntry.TargetKind.USER,
            target_name=user.username,
            target_id=user.pk,
            changes=changes,
        )


def user_password_set_audit(*, actor: User, user: User) -> list[AuditEntry]:
    """Record that an admin set `user`'s password, or turned their password login off (an
    unusable password). Call it in the transaction that saved the password: Django's
    admin view saves it itself. Neither password nor hash is ever written to the log.
    """
    if not actor.is_lab_admin:
        raise PermissionDenied("Only lab admins set other users' passwords.")
    new = "set by an admin" if user.has_usable_password() else "password login disabled"
    return audit_entries_write(
        actor=actor,
        target_kind=AuditEntry.TargetKind.USER,
        target_name=user.username,
        target_id=user.pk,
        changes={"password": ("", new)},
    )


def accounts_delete(*, actor: User, accounts: Iterable[User | LabGroup]) -> None:
    """Delete users or lab groups (the Django admin's delete), each deletion audited in the
    same transaction: who was deleted, by whom. Their rows and ids go; the audit entries,
    which name them, stay. A user or group that still owns jobs cannot be deleted (the
    jobs PROTECT them; the admin lists what is in the way before it gets here).
    """
    if not actor.is_lab_admin:
        raise PermissionDenied("Only lab admins delete accounts.")
    with transaction.atomic():
        for account in accounts:
            is_user = isinstance(account, User)
            name = account.username if is_user else account.name
            audit_entries_write(
                actor=actor,
                target_kind=AuditEntry.TargetKind.USER if is_user else AuditEntry.TargetKind.GROUP,
                target_name=name,
                target_id=account.pk,
                changes={"deleted": ("", "deleted")},
            )
            account.delete()


def lab_group_members_set(
    *,
    actor: User,
    group: LabGroup,
    members: Iterable[User],
    coordinators: Iterable[User] | None = None,
) -> list[AuditEntry]:
    """Make `members` exactly the group's members, and `coordinators` (unless None) exactly
    its coordinators (the Django admin's group page), and audit each change on the group:
    the usernames before and after. Returns the entries written.

    Only lab admins may (PermissionDenied otherwise): a coordinator sees the group's jobs,
    so naming one is a lab admin's decision, as in Slurm (`sacctmgr add coordinator`).
    """
    if not actor.is_lab_admin:
        raise PermissionDenied("Only lab admins change lab groups.")
    people = {"members": list(members)}
    if coordinators is not None:
        people["coordinators"] = list(coordinators)
    changes: dict[str, tuple[Any, Any]] = {}
    with transaction.atomic():
        LabGroup.objects.select_for_update(no_key=True).get(pk=group.pk)
        for field, users in people.items():
            related = getattr(group, field)
            before = sorted(related.values_list("username", flat=True))
            after = sorted(user.username for user in users)
            related.set(users)
            if before != after:
                changes[field] = (before, after)
        return audit_entries_write(
            actor=actor,
            target_kind=AuditEntry.TargetKind.GROUP,
            target_name=group.name,
            target_id=group.pk,
            changes=changes,
        )


def webhook_audit_text(url: str) -> str:
    """A webhook URL as the audit log keeps it: scheme, host and port only. The path of a
    Slack or Mattermost incoming webhook is its secret, as are a password or a token in the
    query, and the log is read by every admin and kept for good."""
    if not url:
        return ""
    parts = urlsplit(url)
    host_and_port = parts.netloc.rpartition("@")[2]  # brackets of an IPv6 address kept
    return f"{parts.scheme}://{host_and_port}/…"


def lab_group_save(*, actor: User, group: LabGroup) -> list[AuditEntry]:
    """Save an admin's edit of a group's own fields (the Django admin's group page; `group`
    holds the new values) and audit a change of its webhook, which decides where the
    control plane posts about the group's jobs. Only lab admins may."""
    if not actor.is_lab_admin:
        raise PermissionDenied("Only lab admins change lab groups.")
    with transaction.atomic():
        if group.pk is None:
            before = ""
            group.save()
        else:
            stored = LabGroup.objects.select_for_update(no_key=True).get(pk=group.pk)
            before = stored.webhook_url
            group.save(update_fields=LAB_GROUP_FIELDS)
        if before == group.webhook_url:
            return []
        return audit_entries_write(
            actor=actor,
            target_kind=AuditEntry.TargetKind.GROUP,
            target_name=group.name,
            target_id=group.pk,
            changes={
                "webhook_url": (webhook_audit_text(before), webhook_audit_text(group.webhook_url))
            },
        )


# --------------------------------------------------------------------------- quotas

QUOTA_FIELDS = ("weight", "max_gpus", "max_running_jobs", "max_pending_jobs")
QUOTA_LIMIT_FIELDS = ("max_gpus", "max_running_jobs", "max_pending_jobs")
# Only a group has a guarantee (Kueue's nominal quota belongs to a ClusterQueue, not a user).
GROUP_QUOTA_FIELDS = (*QUOTA_FIELDS, "guaranteed_gpus")
# PositiveIntegerField on PostgreSQL is a 4-byte integer: larger values would fail at the
# INSERT as a 500, so they are refused here with the field named.
_LIMIT_MAX = 2_147_483_647


def audit_text(value: Any) -> str:
    """How a value is written in the audit log: '' for None ("no limit", "off"), lists as JSON."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return json.dumps(list(value))
    return str(value)


def audit_entries_write(
    *,
    actor: User | None,
    target_kind: AuditEntry.TargetKind,
    target_name: str,
    changes: Mapping[str, tuple[Any, Any]],
    actor_username: str = "",
    target_id: int | None = None,
) -> list[AuditEntry]:
    """Write one audit entry per changed field (`changes`: field -> (old, new)), in one INSERT.

    Call it inside the transaction of the change itself, so the log and the change commit or
    roll back together. `actor_username` names an actor without an account row (a shell, a
    script) when `actor` is None; an automatic change has neither and shows no actor.
    `target_id` is the id of the user or group the entry is about (AuditEntry.target_id):
    every entry about one must carry it, or it drops out of that account's history.
    """
    now = timezone.now()
    return AuditEntry.objects.bulk_create(
        [
            AuditEntry(
                at=now,
                actor=actor,
                actor_username=actor.username if actor is not None else actor_username,
                target_kind=target_kind,
                target_name=target_name,
                target_id=target_id,
                field=field,
                old_value=audit_text(old),
                new_value=audit_text(new),
            )
            for field, (old, new) in changes.items()
        ]
    )


WEIGHT_MIN = 0.001
WEIGHT_MAX = 1_000_000.0


# "max_gpus[a100]": the cap on GPUs of one device type at once (DeviceTypeQuota), next to
# the overall `max_gpus`. The field names the type, so the audit log reads the same way.
_TYPE_QUOTA_FIELD = re.compile(r"max_gpus\[(?P<device_type>[-a-zA-Z0-9_]{1,32})\]")


def type_quota_field(device_type_name: str) -> str:
    """The quota field of one device type's cap: 'a100' -> 'max_gpus[a100]'."""
    return f"max_gpus[{device_type_name}]"


def _quota_values_validate(
    changes: Mapping[str, Any], fields: tuple[str, ...] = QUOTA_FIELDS
) -> dict[str, Any]:
    """Check every proposed quota value; raise ValidationFailed naming each bad field."""
    errors: dict[str, list[str]] = {}
    clean: dict[str, Any] = {}
    type_fields = {
        field: match["device_type"]
        for field in changes
        if (match := _TYPE_QUOTA_FIELD.fullmatch(field)) is not None
    }
    known_types = set(
        DeviceType.objects.filter(name__in=type_fields.values()).values_list("name", flat=True)
    )
    for field, value in changes.items():
        empty = "no guarantee" if field == "guaranteed_gpus" else "no limit"
        if field in type_fields and type_fields[field] not in known_types:
            errors[field] = [f"No GPU type is named {type_fields[field]!r}."]
        elif field not in fields and field not in type_fields:
            errors[field] = [
                f"Unknown field; choose from: {', '.join(fields)}, "
                "or max_gpus[<GPU type>] for one type's cap."
            ]
        elif field == "weight":
            # bool is an int subclass: True must not silently become weight 1.
            if isinstance(value, bool) or not isinstance(value, int | float):
                errors[field] = ["Enter a number greater than 0."]
            elif not math.isfinite(value) or not WEIGHT_MIN <= value <= WEIGHT_MAX:
                # Bounded so that shares stay meaningful: two weights of 1e308 summed to
                # infinity and every entitled share became 0.
                errors[field] = [f"The weight must be between {WEIGHT_MIN:g} and {WEIGHT_MAX:g}."]
            else:
                clean[field] = float(value)
        elif value is None:
            clean[field] = None
        elif isinstance(value, bool) or not isinstance(value, int):
            errors[field] = [f"Enter a whole number of 0 or more, or leave it empty for {empty}."]
        elif not 0 <= value <= _LIMIT_MAX:
            errors[field] = [f"Must be between 0 and {_LIMIT_MAX} (empty = {empty})."]
        else:
            clean[field] = value
    if errors:
        raise ValidationFailed(errors)
    return clean


def _quota_update(
    *,
    actor: User,
    model: type[User] | type[LabGroup],
    pk: int,
    kind: AuditEntry.TargetKind,
    changes: Mapping[str, Any],
    fields: tuple[str, ...] = QUOTA_FIELDS,
) -> list[AuditEntry]:
    if not actor.is_lab_admin:
        raise PermissionDenied("Only lab admins change quotas and weights.")
    values = _quota_values_validate(changes, fields)
    with transaction.atomic():
        # FOR NO KEY UPDATE, as jobs.services does for these rows: it serializes two admins
        # editing at once without blocking job inserts that reference the row.
        account = model.objects.select_for_update(no_key=True).filter(pk=pk).first()
        if account is None:
            raise NotFound(f"No {kind.label.lower()} with id {pk}.")
        owner = {"user": account} if isinstance(account, User) else {"group": account}
        type_caps = {
            type_quota_field(name): (quota_id, cap)
            for quota_id, name, cap in DeviceTypeQuota.objects.filter(**owner).values_list(
                "id", "device_type__name", "max_gpus"
            )
        }
        current = {field: getattr(account, field) for field in fields}
        current.update((field, cap) for field, (_, cap) in type_caps.items())
        changed = {
            field: (current.get(field), value)
            for field, value in values.items()
            if current.get(field) != value
        }
        if not changed:
            return []
        _guarantee_check({**current, **values})
        plain = [field for field in changed if field in fields]
        for field in plain:
            setattr(account, field, changed[field][1])
        if plain:
            account.save(update_fields=plain)
        _type_caps_write(owner=owner, existing=type_caps, changed=changed)
        name = account.username if isinstance(account, User) else account.name
        return audit_entries_write(
            actor=actor, target_kind=kind, target_name=name, target_id=account.pk, changes=changed
        )


def _guarantee_check(values: Mapping[str, Any]) -> None:
    """A guarantee above the group's own cap could never be used: refuse it, naming the
    field (the database's CHECK constraint would otherwise answer with a 500)."""
    guaranteed, cap = values.get("guaranteed_gpus"), values.get("max_gpus")
    if guaranteed is not None and cap is not None and guaranteed > cap:
        raise ValidationFailed(
            {
                "guaranteed_gpus": [
                    f"The guarantee ({guaranteed}) cannot exceed the group's max GPUs ({cap})."
                ]
            }
        )


def _type_caps_write(
    *,
    owner: Mapping[str, User | LabGroup],
    existing: Mapping[str, tuple[int, int]],
    changed: Mapping[str, tuple[Any, Any]],
) -> None:
    """Apply the changed per-type caps: None removes the cap, a number sets it."""
    for field, (_, new) in changed.items():
        match = _TYPE_QUOTA_FIELD.fullmatch(field)
        if match is None:
            continue  # a plain quota field
        if new is None:
            DeviceTypeQuota.objects.filter(pk=existing[field][0]).delete()
        else:
            DeviceTypeQuota.objects.update_or_create(
                **owner,
                device_type=DeviceType.objects.get(name=match["device_type"]),
                defaults={"max_gpus": new},
            )


def user_quota_update(*, actor: User, user_id: int, changes: Mapping[str, Any]) -> list[AuditEntry]:
    """Change a user's fair-share weight and limits; return the audit entries written.

    1. Only lab admins may (PermissionDenied otherwise).
    2. Every value is checked: weight a finite number > 0; each limit None (no limit) or a
       whole number >= 0. `max_gpus[<type>]` caps the GPUs of one device type (None removes
       the cap). Any bad field raises ValidationFailed naming it, and nothing is saved.
    3. Only fields whose value differs are written, each with one audit entry, atomically.
       Nothing changed -> no write and no entry (an empty list).
    """
    return _quota_update(
        actor=actor, model=User, pk=user_id, kind=AuditEntry.TargetKind.USER, changes=changes
    )


def group_quota_update(
    *, actor: User, group_id: int, changes: Mapping[str, Any]
) -> list[AuditEntry]:
    """Change a lab group's fair-share weight, limits and guarantee; the rules of
    `user_quota_update`, plus `guaranteed_gpus` (None: no guarantee), which may not exceed
    the group's `max_gpus` as it stands after the change."""
    return _quota_update(
        actor=actor,
        model=LabGroup,
        pk=group_id,
        kind=AuditEntry.TargetKind.GROUP,
        changes=changes,
        fields=GROUP_QUOTA_FIELDS,
    )
