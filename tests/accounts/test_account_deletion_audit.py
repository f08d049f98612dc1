"""Deleting a user or a lab group in the Django admin is in the audit log, and a group's
fair-share usage is not an admin's to edit."""

from __future__ import annotations

import pytest

from accounts.models import LabGroup, User
from tests.accounts.test_fixacct_admin_audit import NO_TYPE_QUOTAS, entries, logged_in
from tests.factories import JobFactory, UserFactory


@pytest.mark.django_db
def test_deleting_a_user_in_the_admin_is_audited(lab_admin):
    leaver = UserFactory(username="leaver")

    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{leaver.pk}/delete/", {"post": "yes"}
    )

    assert response.status_code == 302
    assert not User.objects.filter(pk=leaver.pk).exists()
    assert entries() == [("user", "leaver", leaver.pk, "deleted", "", "deleted")]


@pytest.mark.django_db
def test_deleting_groups_with_the_bulk_action_audits_each(lab_admin, vision, nlp):
    logged_in(lab_admin).post(
        "/admin/accounts/labgroup/",
        {"action": "delete_selected", "_selected_action": [vision.pk, nlp.pk], "post": "yes"},
    )

    assert not LabGroup.objects.filter(pk__in=[vision.pk, nlp.pk]).exists()
    assert sorted(entries()) == sorted(
        [
            ("group", "vision", vision.pk, "deleted", "", "deleted"),
            ("group", "nlp", nlp.pk, "deleted", "", "deleted"),
        ]
    )


@pytest.mark.django_db
def test_a_user_with_jobs_is_not_deleted_and_nothing_is_audited(lab_admin, owner):
    JobFactory(owner=owner)

    logged_in(lab_admin).post(f"/admin/accounts/user/{owner.pk}/delete/", {"post": "yes"})

    assert User.objects.filter(pk=owner.pk).exists()
    assert entries() == []


@pytest.mark.django_db
def test_a_groups_usage_cannot_be_edited_in_the_admin(lab_admin, vision):
    LabGroup.objects.filter(pk=vision.pk).update(usage=3600.0)
    data = {"name": "vision", "description": "", "usage": "0", **NO_TYPE_QUOTAS}

    response = logged_in(lab_admin).post(f"/admin/accounts/labgroup/{vision.pk}/change/", data)

    assert response.status_code == 302
    assert LabGroup.objects.get(pk=vision.pk).usage == 3600.0
