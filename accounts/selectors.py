"""Reads for people and tokens."""

from __future__ import annotations

from django.db.models import QuerySet

from .models import ApiToken, LabGroup, User


def api_token_list(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user)


def user_groups(*, user: User) -> QuerySet[LabGroup]:
    return user.lab_groups.all()
