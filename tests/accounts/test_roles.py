"""The role is the one source of a user's powers: Django's is_staff and is_superuser
follow it however the user is saved, so demoting or promoting in the admin takes effect."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.core.management import call_command
from django.test import Client

from accounts.choices import Role
from accounts.models import User
from accounts.services import user_create
from tests.accounts.admin_forms import user_change_data

# A module name that starts with a digit cannot be imported with `import`.
role_migration = importlib.import_module("accounts.migrations.0004_role_decides_powers")


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_an_admin_demoted_to_student_in_the_admin_loses_every_admin_page(lab_admin):
    boss = user_create(username="boss", password="pw-boss-123", role=Role.ADMIN)

    response = logged_in(boss).post(
        f"/admin/accounts/user/{lab_admin.pk}/change/",
        user_change_data(lab_admin, role=Role.STUDENT),
    )

    assert response.status_code == 302
    lab_admin.refresh_from_db()
    assert (lab_admin.role, lab_admin.is_staff, lab_admin.is_superuser) == (
        Role.STUDENT, False, False
    )  # fmt: skip
    assert not lab_admin.is_lab_admin
    demoted = logged_in(lab_admin)
    assert demoted.get("/manage/quotas/").status_code == 403
    assert demoted.get("/manage/scheduler/").status_code == 403
    assert demoted.get("/admin/accounts/user/").status_code == 302  # to the admin's login
    assert "Django admin" not in demoted.get("/jobs/").content.decode()


@pytest.mark.django_db
def test_a_student_promoted_to_admin_in_the_admin_gets_the_django_admin_too(lab_admin, owner):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/", user_change_data(owner, role=Role.ADMIN)
    )

    assert response.status_code == 302
    owner.refresh_from_db()
    assert (owner.is_staff, owner.is_superuser, owner.is_lab_admin) == (True, True, True)
    promoted = logged_in(owner)
    assert "Django admin" in promoted.get("/jobs/").content.decode()
    assert promoted.get("/admin/").status_code == 200
    assert promoted.get("/admin/accounts/user/").status_code == 200
    assert promoted.get("/manage/quotas/").status_code == 200


@pytest.mark.django_db
def test_the_admin_user_page_has_no_staff_superuser_or_permission_boxes(lab_admin, owner):
    page = logged_in(lab_admin).get(f"/admin/accounts/user/{owner.pk}/change/").content.decode()

    assert 'name="role"' in page
    for hidden in ("is_staff", "is_superuser", "groups", "user_permissions"):
        assert f'name="{hidden}"' not in page


@pytest.mark.django_db
def test_posted_superuser_flags_cannot_outvote_the_role(lab_admin, owner):
    logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/",
        user_change_data(owner, is_staff="on", is_superuser="on"),
    )

    owner.refresh_from_db()
    assert (owner.role, owner.is_staff, owner.is_superuser) == (Role.STUDENT, False, False)


@pytest.mark.django_db
def test_saving_only_the_role_saves_the_flags_with_it(owner):
    owner.role = Role.ADMIN
    owner.save(update_fields=["role"])

    fresh = User.objects.get(pk=owner.pk)
    assert (fresh.is_staff, fresh.is_superuser) == (True, True)


@pytest.mark.django_db
def test_createsuperuser_makes_a_lab_admin(monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "pw-super-123")
    call_command("createsuperuser", "--noinput", username="super", email="s@example.edu")

    user = User.objects.get(username="super")
    assert (user.role, user.is_staff, user.is_superuser, user.is_lab_admin) == (
        Role.ADMIN, True, True, True
    )  # fmt: skip


@pytest.mark.django_db
def test_the_upgrade_makes_superusers_admins_and_brings_every_flag_in_step(owner, teammate):
    # As the rows may be before the upgrade: written around User.save, which would sync them.
    User.objects.filter(pk=owner.pk).update(is_superuser=True, is_staff=True)
    User.objects.filter(pk=teammate.pk).update(is_staff=True)
    root = User.objects.create(username="old-root")
    User.objects.filter(pk=root.pk).update(role=Role.ADMIN, is_staff=False, is_superuser=False)

    role_migration.role_from_superuser_then_sync_flags(apps, None)

    rows = {u.username: (u.role, u.is_staff, u.is_superuser) for u in User.objects.all()}
    assert rows["alice"] == (Role.ADMIN, True, True)  # a superuser keeps their access
    assert rows["bob"] == (Role.STUDENT, False, False)
    assert rows["old-root"] == (Role.ADMIN, True, True)


def test_lab_admin_powers_follow_the_role_alone():
    assert not User(role=Role.STUDENT, is_superuser=True, is_staff=True).is_lab_admin
    assert User(role=Role.ADMIN).is_lab_admin


@pytest.mark.django_db
def test_the_admin_add_form_sets_the_role_and_its_powers_with_it(lab_admin):
    response = logged_in(lab_admin).post(
        "/admin/accounts/user/add/",
        {
            "username": "dave",
            "usable_password": "true",
            "password1": "Zx9!long-pass",
            "password2": "Zx9!long-pass",
            "role": Role.ADMIN,
            "type_quotas-TOTAL_FORMS": "0",
            "type_quotas-INITIAL_FORMS": "0",
        },
    )

    assert response.status_code == 302
    dave = User.objects.get(username="dave")
    assert (dave.role, dave.is_staff, dave.is_superuser) == (Role.ADMIN, True, True)
