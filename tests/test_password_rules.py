"""Passwords: Django's common-password and all-digit rules apply, on every path that sets one."""

from __future__ import annotations

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError


@pytest.mark.parametrize("weak", ["password", "qwertyui", "12345678", "9081726354"])
def test_common_and_all_digit_passwords_are_refused(weak: str) -> None:
    with pytest.raises(ValidationError):
        validate_password(weak)


def test_the_demo_password_and_a_passphrase_pass() -> None:
    validate_password("gpulab-demo")
    validate_password("a-much-longer-secret-9")
