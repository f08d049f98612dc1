"""Clear failed-login counts and lockouts before their window ends (accounts.lockout)."""

from __future__ import annotations

import ipaddress

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounts.lockout import LockoutCleared, login_failures_clear


def _is_address(target: str) -> bool:
    """An address, or an IPv6 /64 as the lockout log names one."""
    try:
        ipaddress.ip_network(target, strict=False)
    except ValueError:
        return False
    return True


class Command(BaseCommand):
    help = (
        "Clear the failed logins and lockouts of each USERNAME (from every address) or "
        "ADDRESS (its own count, and every username tried from it), and print what was cleared."
    )

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("targets", nargs="+", metavar="username|address")

    def handle(self, *args, targets: list[str], **options) -> None:  # type: ignore[no-untyped-def]
        for target in targets:
            try:
                # Usernames may look like addresses ("10.0.0.1" is a valid one): both go.
                cleared = login_failures_clear(username=target)
                if _is_address(target):
                    cleared += login_failures_clear(ip=target)
            except Exception as exc:
                raise CommandError(f"The cache is unreachable: {exc}") from exc
            if not cleared:
                self.stdout.write(f"Nothing to clear for {target!r}.")
            for entry in cleared:
                self.stdout.write(f"Cleared {_describe(entry)}.")


def _describe(entry: LockoutCleared) -> str:
    text = f"{entry.described}: {entry.failures} failed login{'s' if entry.failures != 1 else ''}"
    if entry.locked_until is not None:
        local = timezone.localtime(entry.locked_until)
        text += f", locked until {local:%H:%M} {local.tzname()}"
    return text
