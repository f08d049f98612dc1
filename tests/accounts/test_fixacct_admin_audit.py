"""What an admin does to accounts in the Django admin is in the audit log (/manage/audit/):
revoking users' API tokens, changing a user's role, active flag, name, lab groups or
default group, setting their password, and changing a group's members. Each entry is
written in the transaction of the change, and names the account by id as well as name."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.core.exceptions import PermissionDenied
from django.test import Client

from accounts.choices import Role
from accounts.models import AuditEntry, User
from accounts.services import (
    api_token_create,
    api_token_revoke,
    api_tokens_revoke,
    lab_group_members_set,
    user_lab_groups_set,
)
from tests.accounts.admin_forms import user_change_data

# The management form of the (read-only) per-type caps inline, which every admin form posts.
NO_TYPE_QUOTAS = {
    "type_quotas-TOTAL_FORMS": "0",
    "type_quotas-INITIAL_FORMS": "0",
    "type_quotas-MIN_NUM_FORMS": "0",
    "type_quotas-MAX_NUM_FORMS": "1000",
}


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def entries(**filters: object) -> list[tuple[str, str, int | None, str, str, str]]:
    return [
        (e.target_kind, e.target_name, e.target_id, e.field, e.old_value, e.new_value)
        for e in AuditEntry.objects.filter(**filters).order_by("id")
    ]


# ----------------------------------------------------------------------------- API tokens


@pytest.mark.django_db
def test_the_admins_token_revoke_action_is_audited_and_counts_only_tokens_it_revoked(
    owner, teammate, lab_admin
):
    laptop, _ = api_token_create(user=owner, name="laptop")
    old, _ = api_token_create(user=teammate, name="old")
    api_token_revoke(user=teammate, token_id=old.pk)  # the owner's own revoke: not audited
    assert not AuditEntry.objects.exists()

    response = logged_in(lab_admin).post(
        "/admin/accounts/apitoken/",
        {"action": "revoke", "_selected_action": [laptop.pk, old.pk]},
        follow=True,
    )

    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "Revoked 1 token(s). 1 had been revoked already."
    ]
    laptop.refresh_from_db()
    assert laptop.revoked_at is not None
    assert entries() == [
        ("api_token", "alice", owner.pk, "revoked_at", "", f"token 'laptop' ({laptop.prefix}…)")
    ]
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.actor_username) == (lab_admin, "root")


@pytest.mark.django_db
def test_an_admin_cannot_delete_a_token_only_revoke_it(owner, lab_admin):
    # A deleted token would stop working with no trace in the audit log.
    laptop, _ = api_token_create(user=owner, name="laptop")
    client = logged_in(lab_admin)

    bulk = client.post(
        "/admin/accounts/apitoken/",
        {"action": "delete_selected", "_selected_action": [laptop.pk], "post": "yes"},
    )
    single = client.post(f"/admin/accounts/apitoken/{laptop.pk}/delete/", {"post": "yes"})

    assert single.status_code == 403
    assert bulk.status_code in (200, 302)  # "No action selected": the action is not offered
    assert type(laptop).objects.filter(pk=laptop.pk).exists()


@pytest.mark.django_db
def test_revoking_again_writes_nothing_and_only_admins_may(owner, teammate, lab_admin):
    token, _ = api_token_create(user=owner, name="laptop")
    assert api_tokens_revoke(actor=lab_admin, token_ids=[token.pk]) == 1
    revoked_at = type(token).objects.get(pk=token.pk).revoked_at

    assert api_tokens_revoke(actor=lab_admin, token_ids=[token.pk]) == 0
    with pytest.raises(PermissionDenied):
        api_tokens_revoke(actor=teammate, token_ids=[token.pk])

    assert AuditEntry.objects.count() == 1
    assert type(token).objects.get(pk=token.pk).revoked_at == revoked_at


# ----------------------------------------------------------------------------- user page


@pytest.mark.django_db
def test_promoting_deactivating_and_renaming_a_user_are_audited_old_to_new(owner, lab_admin):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/",
        {
            **user_change_data(owner, username="alice2", role=Role.ADMIN),
            "is_active": "",  # an unticked box is not sent; "" is not "on" either
        },
    )

    assert response.status_code == 302
    owner.refresh_from_db()
    assert (owner.username, owner.role, owner.is_active) == ("alice2", "admin", False)
    assert entries() == [
        ("user", "alice2", owner.pk, "username", "alice", "alice2"),
        ("user", "alice2", owner.pk, "role", "student", "admin"),
        ("user", "alice2", owner.pk, "is_active", "True", "False"),
    ]
    assert {e.actor_username for e in AuditEntry.objects.all()} == {"root"}


@pytest.mark.django_db
def test_moving_a_user_between_lab_groups_is_audited_with_the_default(
    owner, lab_admin, vision, nlp
):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/",
        user_change_data(owner, lab_groups=[str(nlp.pk)], default_group=str(nlp.pk)),
    )

    assert response.status_code == 302
    assert entries() == [
        ("user", "alice", owner.pk, "default_group", "vision", "nlp"),
        ("user", "alice", owner.pk, "lab_groups", '["vision"]', '["nlp"]'),
    ]


@pytest.mark.django_db
def test_saving_a_user_unchanged_writes_no_entry(owner, lab_admin):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/", user_change_data(owner)
    )

    assert response.status_code == 302
    assert entries() == []


@pytest.mark.django_db
def test_a_refused_user_edit_writes_neither_the_change_nor_an_entry(owner, lab_admin, nlp):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/",
        user_change_data(owner, role=Role.ADMIN, default_group=str(nlp.pk)),
    )

    assert response.status_code == 200  # the default group is not one of hers
    owner.refresh_from_db()
    assert owner.role == Role.STUDENT
    assert entries() == []


@pytest.mark.django_db
def test_a_user_added_in_the_admin_gets_an_entry_with_their_role(lab_admin):
    response = logged_in(lab_admin).post(
        "/admin/accounts/user/add/",
        {
            "username": "dave",
            "usable_password": "true",
            "password1": "a-long-enough-secret-7",
            "password2": "a-long-enough-secret-7",
            "role": Role.ADMIN,
            **NO_TYPE_QUOTAS,
        },
    )

    assert response.status_code == 302
    dave = User.objects.get(username="dave")
    assert entries() == [("user", "dave", dave.pk, "role", "", "admin")]


@pytest.mark.django_db
def test_an_admin_setting_a_users_password_is_audited_without_the_password(owner, lab_admin):
    client = logged_in(lab_admin)
    url = f"/admin/accounts/user/{owner.pk}/password/"

    set_it = client.post(
        url,
        {
            "usable_password": "true",
            "password1": "a-new-secret-for-alice-3",
            "password2": "a-new-secret-for-alice-3",
            "set-password": "",
        },
    )
    disable = client.post(url, {"usable_password": "false", "unset-password": ""})

    assert (set_it.status_code, disable.status_code) == (302, 302)
    owner.refresh_from_db()
    assert not owner.has_usable_password()
    assert entries() == [
        ("user", "alice", owner.pk, "password", "", "set by an admin"),
        ("user", "alice", owner.pk, "password", "", "password login disabled"),
    ]
    logged = " ".join(f"{e.old_value} {e.new_value}" for e in AuditEntry.objects.all())
    assert "a-new-secret" not in logged and "pbkdf2" not in logged and "md5" not in logged


@pytest.mark.django_db
def test_a_refused_password_form_writes_no_entry(owner, lab_admin):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/password/",
        {"usable_password": "true", "password1": "one-secret-1", "password2": "other-secret-2"},
    )

    assert response.status_code == 200
    assert entries() == []


@pytest.mark.django_db
def test_the_membership_service_audits_only_an_admins_change(owner, lab_admin, vision, nlp):
    user_lab_groups_set(user=owner, groups=[vision, nlp], default_group=vision)  # a script
    assert entries() == []

    written = user_lab_groups_set(user=owner, groups=[nlp], default_group=nlp, actor=lab_admin)

    assert [(e.field, e.old_value, e.new_value) for e in written] == [
        ("lab_groups", '["nlp", "vision"]', '["nlp"]'),
        ("default_group", "vision", "nlp"),
    ]


# ----------------------------------------------------------------------------- group page


@pytest.mark.django_db
def test_changing_a_groups_members_in_the_admin_is_audited(
    owner, teammate, outsider, lab_admin, vision
):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/labgroup/{vision.pk}/change/",
        {
            "name": "vision",
            "description": "",
            "members": [str(owner.pk), str(outsider.pk)],
            "usage": "0",
            **NO_TYPE_QUOTAS,
        },
    )

    assert response.status_code == 302
    assert sorted(vision.members.values_list("username", flat=True)) == ["alice", "carol"]
    assert entries() == [
        ("group", "vision", vision.pk, "members", '["alice", "bob"]', '["alice", "carol"]')
    ]


@pytest.mark.django_db
def test_the_group_members_service_refuses_a_student_and_skips_no_change(
    owner, teammate, lab_admin, vision
):
    with pytest.raises(PermissionDenied):
        lab_group_members_set(actor=owner, group=vision, members=[owner])

    assert lab_group_members_set(actor=lab_admin, group=vision, members=[teammate, owner]) == []
    assert entries() == []
