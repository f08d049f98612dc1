"""An admin's save of a user or a group (the Django admin) writes the fields its form
edits, not the fair-share usage a job's end charged since the page was read, nor a quota
changed on /manage/quotas/ meanwhile."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client

from accounts.admin import LabGroupAdmin, UserAdmin
from accounts.models import LabGroup, User
from accounts.services import lab_group_save, user_account_save
from tests.accounts.admin_forms import user_change_data

pytestmark = pytest.mark.django_db


def _admin(lab_admin: User) -> Client:
    client = Client()
    client.force_login(lab_admin)
    return client


def test_a_user_saved_by_an_admin_keeps_usage_and_quotas_changed_meanwhile(
    owner, lab_admin, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    original = UserAdmin.get_object

    def get_object(self, request, object_id, from_field=None):  # type: ignore[no-untyped-def]
        user = original(self, request, object_id, from_field)
        if request.method == "POST":  # a job's end, and a quota edit, after the read
            User.objects.filter(pk=owner.pk).update(usage=12345.0, max_gpus=3)
        return user

    monkeypatch.setattr(UserAdmin, "get_object", get_object)
    response = _admin(lab_admin).post(
        f"/admin/accounts/user/{owner.pk}/change/", user_change_data(owner, first_name="Alice")
    )

    assert response.status_code == 302
    owner.refresh_from_db()
    assert (owner.first_name, owner.usage, owner.max_gpus) == ("Alice", 12345.0, 3)


def test_the_service_writes_the_account_fields_only(owner, lab_admin) -> None:  # type: ignore[no-untyped-def]
    User.objects.filter(pk=owner.pk).update(usage=42.0, weight=5.0, password="changed")
    owner.role = "admin"

    user_account_save(actor=lab_admin, user=owner)

    stored = User.objects.get(pk=owner.pk)
    assert (stored.role, stored.is_staff, stored.is_superuser) == ("admin", True, True)
    assert (stored.usage, stored.weight, stored.password) == (42.0, 5.0, "changed")


def test_a_group_saved_by_an_admin_keeps_usage_and_quotas_changed_meanwhile(
    vision, lab_admin, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    original = LabGroupAdmin.get_object

    def get_object(self, request, object_id, from_field=None):  # type: ignore[no-untyped-def]
        group = original(self, request, object_id, from_field)
        if request.method == "POST":
            LabGroup.objects.filter(pk=vision.pk).update(usage=777.0, guaranteed_gpus=2)
        return group

    monkeypatch.setattr(LabGroupAdmin, "get_object", get_object)
    response = _admin(lab_admin).post(
        f"/admin/accounts/labgroup/{vision.pk}/change/",
        {
            "name": "vision",
            "description": "Computer vision",
            "webhook_url": "",
            "members": [str(user.pk) for user in vision.members.all()],
            "coordinators": [],
            "type_quotas-TOTAL_FORMS": "0",
            "type_quotas-INITIAL_FORMS": "0",
            "type_quotas-MIN_NUM_FORMS": "0",
            "type_quotas-MAX_NUM_FORMS": "1000",
        },
    )

    assert response.status_code == 302
    vision.refresh_from_db()
    assert (vision.description, vision.usage, vision.guaranteed_gpus) == (
        "Computer vision",
        777.0,
        2,
    )


def test_the_group_service_writes_the_group_fields_only(vision, lab_admin) -> None:  # type: ignore[no-untyped-def]
    LabGroup.objects.filter(pk=vision.pk).update(usage=9.0, weight=4.0)
    vision.name = "vision-lab"

    lab_group_save(actor=lab_admin, group=vision)

    stored = LabGroup.objects.get(pk=vision.pk)
    assert (stored.name, stored.usage, stored.weight) == ("vision-lab", 9.0, 4.0)


@pytest.mark.parametrize(
    ("model_admin", "model", "saved"),
    [
        (UserAdmin, User, "USER_ACCOUNT_FIELDS"),
        (LabGroupAdmin, LabGroup, "LAB_GROUP_FIELDS"),
    ],
)
def test_every_field_the_admin_page_edits_is_one_its_save_writes(
    rf, lab_admin, owner, vision, model_admin, model, saved
) -> None:  # type: ignore[no-untyped-def]
    # A field added to the page but not to the service's list would be dropped on save
    # without a word. Many-to-many fields are saved by their own services.
    import accounts.services

    request = rf.get("/")
    request.user = lab_admin
    instance = owner if model is User else vision
    form = model_admin(model, admin.site).get_form(request, instance)
    many = {field.name for field in model._meta.get_fields() if field.many_to_many}
    edited = {
        name
        for name, field in form.base_fields.items()
        if name not in many and not field.disabled and name != "password"
    }
    assert edited <= set(getattr(accounts.services, saved))
