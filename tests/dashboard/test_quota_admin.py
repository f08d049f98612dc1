"""Quota and weight editor, the quota services, and the audit log (admins only)."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from accounts.models import AuditEntry, DeviceTypeQuota, LabGroup, User
from accounts.services import group_quota_update, user_quota_update
from config.errors import NotFound, ValidationFailed
from tests.dashboard.helpers import logged_in

BLANK_LIMITS = {"max_gpus": "", "max_running_jobs": "", "max_pending_jobs": ""}
ADMIN_PAGES = [
    "/manage/quotas/",
    "/manage/quotas/users/{user}/",
    "/manage/quotas/groups/{group}/",
    "/manage/audit/",
]

# ----------------------------------------------------------------------------- access


@pytest.mark.django_db
@pytest.mark.parametrize("path", ADMIN_PAGES)
def test_students_get_403_on_every_quota_page(owner, teammate, vision, path):
    client = logged_in(owner)
    url = path.format(user=teammate.pk, group=vision.pk)

    assert client.get(url).status_code == 403
    assert client.post(url, {"weight": "9", **BLANK_LIMITS}).status_code == 403
    teammate.refresh_from_db()
    vision.refresh_from_db()
    assert (teammate.weight, vision.weight) == (1.0, 2.0)
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_a_student_cannot_probe_which_ids_exist(owner):
    assert logged_in(owner).get("/manage/quotas/users/999999/").status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("path", ADMIN_PAGES)
def test_anonymous_visitors_are_sent_to_login(owner, vision, path):
    response = Client().get(path.format(user=owner.pk, group=vision.pk))
    assert response.status_code == 302 and response.url.startswith("/login/")


@pytest.mark.django_db
def test_an_unknown_id_is_404_for_an_admin(lab_admin):
    assert logged_in(lab_admin).get("/manage/quotas/groups/999999/").status_code == 404


@pytest.mark.django_db
def test_the_services_refuse_a_student_actor(owner, teammate, vision):
    with pytest.raises(PermissionDenied):
        user_quota_update(actor=owner, user_id=teammate.pk, changes={"weight": 5})
    with pytest.raises(PermissionDenied):
        group_quota_update(actor=owner, group_id=vision.pk, changes={"weight": 5})
    assert not AuditEntry.objects.exists()


# ----------------------------------------------------------------------------- list


@pytest.mark.django_db
def test_the_list_shows_users_and_groups_with_their_limits(owner, outsider, lab_admin):
    User.objects.filter(pk=owner.pk).update(max_gpus=4, weight=3)

    response = logged_in(lab_admin).get("/manage/quotas/")

    html = response.content.decode()
    assert response.status_code == 200
    assert "alice" in html and "carol" in html and "vision" in html and "nlp" in html
    assert f"/manage/quotas/users/{owner.pk}/" in html
    assert [u.username for u in response.context["users"].object_list] == [
        "alice",
        "carol",
        "root",
    ]


@pytest.mark.django_db
def test_the_list_searches_by_name(owner, outsider, lab_admin):
    response = logged_in(lab_admin).get("/manage/quotas/?q=car")

    assert [u.username for u in response.context["users"].object_list] == ["carol"]
    assert list(response.context["groups"].object_list) == []


@pytest.mark.django_db
def test_the_list_is_paginated_by_50(lab_admin, django_assert_max_num_queries):
    User.objects.bulk_create([User(username=f"student{n:03d}") for n in range(120)])
    client = logged_in(lab_admin)

    with django_assert_max_num_queries(10):
        first = client.get("/manage/quotas/?q=student")
    third = client.get("/manage/quotas/?q=student&users_page=3")

    assert len(first.context["users"].object_list) == 50
    assert "users_page=2" in first.content.decode() and "q=student" in first.content.decode()
    assert third.context["users"].object_list[0].username == "student100"


# ----------------------------------------------------------------------------- edit


@pytest.mark.django_db
def test_editing_writes_only_changed_fields_with_one_audit_entry_each(owner, lab_admin):
    client = logged_in(lab_admin)

    response = client.post(
        f"/manage/quotas/users/{owner.pk}/",
        {"weight": "2.5", "max_gpus": "4", "max_running_jobs": "", "max_pending_jobs": ""},
    )

    assert response.status_code == 302
    owner.refresh_from_db()
    assert (owner.weight, owner.max_gpus, owner.max_running_jobs) == (2.5, 4, None)
    entries = list(AuditEntry.objects.order_by("field"))
    assert [(e.field, e.old_value, e.new_value) for e in entries] == [
        ("max_gpus", "", "4"),
        ("weight", "1.0", "2.5"),
    ]
    assert all(
        e.actor == lab_admin
        and e.actor_username == "root"
        and e.target_kind == "user"
        and e.target_name == "alice"
        for e in entries
    )


@pytest.mark.django_db
def test_saving_unchanged_values_writes_no_audit_entry(vision, lab_admin):
    response = logged_in(lab_admin).post(
        f"/manage/quotas/groups/{vision.pk}/", {"weight": "2", **BLANK_LIMITS}
    )

    assert response.status_code == 302
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_clearing_a_limit_means_no_limit_and_is_audited(vision, lab_admin):
    LabGroup.objects.filter(pk=vision.pk).update(max_pending_jobs=10)

    logged_in(lab_admin).post(
        f"/manage/quotas/groups/{vision.pk}/", {"weight": "2", **BLANK_LIMITS}
    )

    vision.refresh_from_db()
    assert vision.max_pending_jobs is None
    entry = AuditEntry.objects.get()
    assert (entry.target_kind, entry.target_name, entry.field) == (
        "group",
        "vision",
        "max_pending_jobs",
    )
    assert (entry.old_value, entry.new_value) == ("10", "")


@pytest.mark.django_db
@pytest.mark.parametrize("weight", ["0", "-1", "abc", "", "inf", "nan", "1e308", "1e-320"])
def test_an_invalid_weight_names_the_field_and_saves_nothing(owner, lab_admin, weight):
    response = logged_in(lab_admin).post(
        f"/manage/quotas/users/{owner.pk}/",
        {"weight": weight, "max_gpus": "3", "max_running_jobs": "", "max_pending_jobs": ""},
    )

    assert response.status_code == 400
    form = response.context["form"]
    assert list(form.errors) == ["weight"]
    assert "Weight:" in response.content.decode()
    owner.refresh_from_db()
    assert (owner.weight, owner.max_gpus) == (1.0, None)
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["-1", "1.5", "many"])
def test_an_invalid_limit_names_the_field_and_saves_nothing(vision, lab_admin, value):
    response = logged_in(lab_admin).post(
        f"/manage/quotas/groups/{vision.pk}/",
        {"weight": "5", "max_gpus": "", "max_running_jobs": value, "max_pending_jobs": ""},
    )

    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["max_running_jobs"]
    vision.refresh_from_db()
    assert (vision.weight, vision.max_running_jobs) == (2.0, None)


@pytest.mark.django_db
def test_the_edit_page_shows_current_values_and_recent_changes(owner, lab_admin):
    user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"max_gpus": 2})

    response = logged_in(lab_admin).get(f"/manage/quotas/users/{owner.pk}/")

    assert response.status_code == 200
    assert response.context["form"].initial["max_gpus"] == 2
    assert [e.field for e in response.context["history"]] == ["max_gpus"]


# ----------------------------------------------------------------------------- services


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"weight": 0}, "weight"),
        ({"weight": -2.0}, "weight"),
        ({"weight": "3"}, "weight"),
        ({"weight": True}, "weight"),
        ({"weight": float("inf")}, "weight"),
        ({"max_gpus": -1}, "max_gpus"),
        ({"max_gpus": 2.5}, "max_gpus"),
        ({"max_pending_jobs": 2**40}, "max_pending_jobs"),
        ({"usage": 0}, "usage"),
    ],
)
def test_the_service_rejects_bad_values_naming_the_field(owner, lab_admin, changes, field):
    with pytest.raises(ValidationFailed) as caught:
        user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"max_gpus": 3, **changes})

    assert field in caught.value.errors
    owner.refresh_from_db()
    assert owner.max_gpus is None  # the good field in the same call was not saved either
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_the_service_returns_the_entries_it_wrote(vision, lab_admin):
    entries = group_quota_update(
        actor=lab_admin, group_id=vision.pk, changes={"weight": 3, "max_gpus": None}
    )

    assert [(e.field, e.old_value, e.new_value) for e in entries] == [("weight", "2.0", "3.0")]
    assert group_quota_update(actor=lab_admin, group_id=vision.pk, changes={"weight": 3.0}) == []


@pytest.mark.django_db
def test_the_service_raises_not_found_for_an_unknown_account(lab_admin):
    with pytest.raises(NotFound):
        group_quota_update(actor=lab_admin, group_id=424242, changes={"weight": 3})


@pytest.mark.django_db
def test_the_actors_name_survives_their_deletion(owner, lab_admin):
    other_admin = User.objects.create(username="temp-admin", role="admin")
    user_quota_update(actor=other_admin, user_id=owner.pk, changes={"weight": 2})

    other_admin.delete()

    entry = AuditEntry.objects.get()
    assert entry.actor is None and entry.actor_username == "temp-admin"


# ----------------------------------------------------------------------------- audit log


@pytest.mark.django_db
def test_the_audit_page_lists_entries_newest_first_and_filters_by_kind(owner, vision, lab_admin):
    user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"weight": 2})
    group_quota_update(actor=lab_admin, group_id=vision.pk, changes={"max_gpus": 8})
    client = logged_in(lab_admin)

    everything = client.get("/manage/audit/")
    groups_only = client.get("/manage/audit/?kind=group")
    bad_kind = client.get("/manage/audit/?kind=nonsense")

    assert [e.field for e in everything.context["page"].object_list] == ["max_gpus", "weight"]
    assert [e.target_name for e in groups_only.context["page"].object_list] == ["vision"]
    assert bad_kind.status_code == 200 and bad_kind.context["kind"] is None


@pytest.mark.django_db
def test_the_audit_page_is_paginated(owner, lab_admin, django_assert_max_num_queries):
    AuditEntry.objects.bulk_create(
        AuditEntry(target_kind="user", target_name="alice", field="weight", new_value=str(n))
        for n in range(120)
    )
    client = logged_in(lab_admin)

    with django_assert_max_num_queries(8):
        response = client.get("/manage/audit/?kind=user&page=2")

    assert len(response.context["page"].object_list) == 50
    html = response.content.decode()
    assert "page=3" in html and "kind=user" in html


@pytest.mark.django_db
def test_the_django_admin_shows_the_log_read_only(owner, lab_admin):
    user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"weight": 2})
    entry = AuditEntry.objects.get()
    client = logged_in(lab_admin)

    assert client.get("/admin/accounts/auditentry/").status_code == 200
    assert client.get("/admin/accounts/auditentry/add/").status_code == 403
    assert client.post(f"/admin/accounts/auditentry/{entry.pk}/delete/").status_code == 403
    page = client.get(f"/admin/accounts/auditentry/{entry.pk}/change/")
    assert page.status_code == 200 and b'name="field"' not in page.content


# ----------------------------------------------------------------------------- per-type caps


@pytest.mark.django_db
def test_a_gpu_types_own_cap_is_set_and_cleared_on_the_editor_with_an_audit_entry(
    vision, lab_admin, small_cluster
):
    client = logged_in(lab_admin)
    page = f"/manage/quotas/groups/{vision.pk}/"
    assert "Max a100 GPUs" in client.get(page).content.decode()

    response = client.post(page, {"weight": "2", **BLANK_LIMITS, "max_gpus[a100]": "3"})

    assert response.status_code == 302
    cap = DeviceTypeQuota.objects.get(group=vision)
    assert (cap.device_type.name, cap.max_gpus) == ("a100", 3)
    assert client.get(page).context["form"].initial["max_gpus[a100]"] == 3

    client.post(page, {"weight": "2", **BLANK_LIMITS, "max_gpus[a100]": ""})

    assert not DeviceTypeQuota.objects.exists()
    assert [(e.field, e.old_value, e.new_value) for e in AuditEntry.objects.order_by("id")] == [
        ("max_gpus[a100]", "", "3"),
        ("max_gpus[a100]", "3", ""),
    ]


@pytest.mark.django_db
def test_a_bad_type_cap_names_its_field_and_saves_nothing(owner, lab_admin, small_cluster):
    response = logged_in(lab_admin).post(
        f"/manage/quotas/users/{owner.pk}/",
        {"weight": "4", **BLANK_LIMITS, "max_gpus[v100]": "-2"},
    )

    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["max_gpus[v100]"]
    owner.refresh_from_db()
    assert owner.weight == 1.0
    assert not DeviceTypeQuota.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_the_service_refuses_a_cap_on_a_gpu_type_that_does_not_exist(owner, lab_admin):
    with pytest.raises(ValidationFailed) as caught:
        user_quota_update(
            actor=lab_admin, user_id=owner.pk, changes={"weight": 3, "max_gpus[h900]": 2}
        )

    assert list(caught.value.errors) == ["max_gpus[h900]"]
    owner.refresh_from_db()
    assert owner.weight == 1.0


@pytest.mark.django_db
def test_the_django_admin_shows_type_caps_but_cannot_change_them(owner, lab_admin, small_cluster):
    user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"max_gpus[a100]": 2})
    client = Client()
    client.force_login(User.objects.create_superuser("super", password="pw-super-123"))

    page = client.get(f"/admin/accounts/user/{owner.pk}/change/").content.decode()

    assert "a100" in page
    assert 'name="type_quotas-0-max_gpus"' not in page
    assert 'name="type_quotas-__prefix__-max_gpus"' not in page  # no "add another" row
