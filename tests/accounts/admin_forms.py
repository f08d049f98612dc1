"""The POST body of the Django admin's user change form, as a browser sends it."""

from __future__ import annotations

from typing import Any

from accounts.models import User


def user_change_data(user: User, **changes: Any) -> dict[str, Any]:
    """Every field of the change form with the user's current values, then `changes`."""
    data: dict[str, Any] = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "role": user.role,
        "lab_groups": [str(group.pk) for group in user.lab_groups.all()],
        "default_group": str(user.default_group_id or ""),
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "last_login_0": "",
        "last_login_1": "",
        "type_quotas-TOTAL_FORMS": "0",
        "type_quotas-INITIAL_FORMS": "0",
        "type_quotas-MIN_NUM_FORMS": "0",
        "type_quotas-MAX_NUM_FORMS": "1000",
    }
    if user.is_active:
        data["is_active"] = "on"
    data.update(changes)
    return data
