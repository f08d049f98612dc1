"""Writes for people and their API tokens."""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from config.errors import NotFound, ValidationFailed

from .choices import Role
from .models import ApiToken, LabGroup, User

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


def user_create(
    *,
    username: str,
    password: str,
    role: Role = Role.STUDENT,
    email: str = "",
    groups: list[LabGroup] | None = None,
) -> User:
    """Create a lab member; admins get Django-admin access, students do not."""
    with transaction.atomic():
        user = User.objects.create_user(
            username=username,
            password=password,
            email=email,
            role=role,
            is_staff=role == Role.ADMIN,
            is_superuser=role == Role.ADMIN,
        )
        for group in groups or []:
            group.members.add(user)
        if groups:
            user.default_group = groups[0]
            user.save(update_fields=["default_group"])
    return user
