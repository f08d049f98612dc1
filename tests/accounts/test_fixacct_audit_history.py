"""The quota editor's history of a user or group follows the account by id: a renamed
account keeps it, and a new account given a freed name does not inherit it. Entries older
than AuditEntry.target_id get the id of the account holding their name (migration 0006)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.test import Client

from accounts.models import AuditEntry, LabGroup, User
from accounts.services import group_quota_update, user_account_save, user_quota_update

backfill = importlib.import_module("accounts.migrations.0006_auditentry_target_id")


def history(client: Client, path: str) -> list[tuple[str, str, str]]:
    response = client.get(path)
    assert response.status_code == 200
    return [(e.field, e.old_value, e.new_value) for e in response.context["history"]]


@pytest.fixture
def admin_client(lab_admin) -> Client:
    client = Client()
    client.force_login(lab_admin)
    return client


@pytest.mark.django_db
def test_a_renamed_user_keeps_their_history_and_a_new_user_with_the_old_name_has_none(
    owner, lab_admin, admin_client
):
    user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"max_gpus": 2})
    owner.username = "alice2"
    user_account_save(actor=lab_admin, user=owner)
    newcomer = User.objects.create_user(username="alice", password="pw-new-12345")

    assert history(admin_client, f"/manage/quotas/users/{owner.pk}/") == [("max_gpus", "", "2")]
    assert history(admin_client, f"/manage/quotas/users/{newcomer.pk}/") == []


@pytest.mark.django_db
def test_a_renamed_group_keeps_its_history(vision, lab_admin, admin_client):
    group_quota_update(actor=lab_admin, group_id=vision.pk, changes={"weight": 3})
    LabGroup.objects.filter(pk=vision.pk).update(name="vision-lab")
    newcomer = LabGroup.objects.create(name="vision")

    assert history(admin_client, f"/manage/quotas/groups/{vision.pk}/") == [
        ("weight", "2.0", "3.0")
    ]
    assert history(admin_client, f"/manage/quotas/groups/{newcomer.pk}/") == []


@pytest.mark.django_db
def test_the_quota_history_shows_quota_fields_only(owner, lab_admin, admin_client):
    user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"weight": 2})
    owner.role = "admin"
    user_account_save(actor=lab_admin, user=owner)  # in the audit log, not the quota history

    assert history(admin_client, f"/manage/quotas/users/{owner.pk}/") == [("weight", "1.0", "2.0")]
    assert AuditEntry.objects.filter(target_id=owner.pk, field="role").exists()


@pytest.mark.django_db
def test_every_quota_entry_names_its_account_by_id(owner, vision, lab_admin):
    user_entries = user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"weight": 2})
    group_entries = group_quota_update(actor=lab_admin, group_id=vision.pk, changes={"weight": 5})

    assert [e.target_id for e in user_entries] == [owner.pk]
    assert [e.target_id for e in group_entries] == [vision.pk]


@pytest.mark.django_db
def test_the_migration_gives_old_entries_the_id_of_the_account_with_their_name(
    owner, vision, lab_admin
):
    def old_entry(kind: str, name: str) -> AuditEntry:  # as written before target_id
        return AuditEntry.objects.create(
            target_kind=kind, target_name=name, field="weight", old_value="1", new_value="2"
        )

    mine = old_entry("user", "alice")
    group = old_entry("group", "vision")
    gone = old_entry("user", "deleted-long-ago")
    same_name_other_kind = old_entry("group", "alice")
    scheduler = old_entry("scheduler", "root")

    backfill.target_ids_backfill(apps, None)

    ids = dict(
        AuditEntry.objects.filter(
            pk__in=[e.pk for e in (mine, group, gone, same_name_other_kind, scheduler)]
        ).values_list("pk", "target_id")
    )
    assert ids == {
        mine.pk: owner.pk,
        group.pk: vision.pk,
        gone.pk: None,
        same_name_other_kind.pk: None,
        scheduler.pk: None,
    }
