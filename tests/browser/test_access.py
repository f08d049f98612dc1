"""A student cannot open the admin pages, by link or by typing the address."""

from __future__ import annotations

import pytest

from accounts.models import LabGroup, User
from tests.browser.conftest import Ui

ADMIN_PAGES = [
    "dashboard:usage",
    "dashboard:quotas",
    "dashboard:quota-user",
    "dashboard:quota-group",
    "dashboard:scheduler-settings",
    "dashboard:audit",
]


def test_student_gets_403_on_every_admin_page_and_no_admin_links(
    ui: Ui, owner: User, vision: LabGroup, lab_admin: User
) -> None:
    ui.login("alice")
    nav = ui.page.get_by_role("navigation", name="Main")
    for label in ("Usage report", "Quotas", "Scheduler", "Audit log", "Django admin"):
        assert nav.get_by_role("link", name=label, exact=True).count() == 0, label

    kwargs = {
        "dashboard:quota-user": {"user_id": owner.pk},
        "dashboard:quota-group": {"group_id": vision.pk},
    }
    for name in ADMIN_PAGES:
        response = ui.goto(name, step=name.replace(":", "-"), **kwargs.get(name, {}))
        assert response.status == 403, f"{name} answered {response.status} to a student"


def test_student_is_sent_to_the_admin_login_by_django_admin(ui: Ui, owner: User) -> None:
    ui.login("alice")
    response = ui.goto("/admin/", step="django-admin")
    # Django admin answers a non-staff user with a redirect to its own login form.
    assert response.request.redirected_from is not None
    assert response.request.redirected_from.url.endswith("/admin/")
    assert "/admin/login/" in ui.page.url
    assert ui.page.get_by_text("Site administration").count() == 0


@pytest.mark.parametrize("name", [*ADMIN_PAGES[:2], "dashboard:scheduler-settings"])
def test_admin_opens_the_admin_pages(ui: Ui, lab_admin: User, name: str) -> None:
    """The other side of the check above: the same pages work for an admin."""
    ui.login("root")
    response = ui.goto(name, step="page")
    assert response.status == 200, f"{name} answered {response.status} to an admin"
