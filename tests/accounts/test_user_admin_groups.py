"""The Django admin's user page sets lab-group membership, and keeps the default group
among the user's groups (a default the user is not in charges their jobs to no group)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from accounts.models import User
from accounts.services import user_lab_groups_set
from config.errors import ValidationFailed
from tests.accounts.admin_forms import user_change_data


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_the_user_page_edits_lab_groups_not_django_auth_groups(lab_admin, owner):
    page = logged_in(lab_admin).get(f"/admin/accounts/user/{owner.pk}/change/").content.decode()

    assert 'name="lab_groups"' in page
    assert 'name="groups"' not in page and 'name="user_permissions"' not in page


@pytest.mark.django_db
def test_an_admin_moves_a_user_to_another_group_and_makes_it_the_default(
    lab_admin, owner, vision, nlp
):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/",
        user_change_data(owner, lab_groups=[str(nlp.pk)], default_group=str(nlp.pk)),
    )

    assert response.status_code == 302
    owner.refresh_from_db()
    assert list(owner.lab_groups.all()) == [nlp]
    assert owner.default_group == nlp


@pytest.mark.django_db
def test_a_default_group_the_user_is_not_in_is_refused_naming_the_field(lab_admin, owner, nlp):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/",
        user_change_data(owner, default_group=str(nlp.pk)),
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["default_group"]
    assert "nlp is not one of this user's lab groups" in errors["default_group"][0]
    assert re.search(r"errorlist.*nlp is not one of", response.content.decode(), re.S)
    owner.refresh_from_db()
    assert owner.default_group.name == "vision"


@pytest.mark.django_db
def test_leaving_the_default_group_without_choosing_another_is_refused(
    lab_admin, owner, vision, nlp
):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/",
        user_change_data(owner, lab_groups=[str(nlp.pk)]),
    )

    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["default_group"]
    assert list(owner.lab_groups.all()) == [vision]


@pytest.mark.django_db
def test_the_membership_service_refuses_a_foreign_default_and_writes_nothing(owner, vision, nlp):
    with pytest.raises(ValidationFailed) as caught:
        user_lab_groups_set(user=owner, groups=[vision], default_group=nlp)

    assert list(caught.value.errors) == ["default_group"]
    owner.refresh_from_db()
    assert (list(owner.lab_groups.all()), owner.default_group) == ([vision], vision)
