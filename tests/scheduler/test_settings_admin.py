"""The scheduler settings in the Django admin: validated (never a 500), audited, and safe
when two admins edit at once."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.choices import Role
from accounts.models import AuditEntry, User
from accounts.services import user_create
from scheduler.core.types import DEFAULT_QUEUE_THRESHOLDS
from scheduler.models import SchedulerConfig
from scheduler.selectors import scheduler_config_get
from scheduler.settings_services import scheduler_config_update
from tests.page_forms import form_values

URL = "/admin/scheduler/schedulerconfig/1/change/"


def superuser(username: str) -> User:
    user = user_create(username=username, password=f"pw-{username}-123", role=Role.ADMIN)
    user.is_staff = user.is_superuser = True
    user.save()
    return user


@pytest.fixture
def admin_client(db) -> Client:
    scheduler_config_get()
    client = Client(raise_request_exception=False)
    client.force_login(superuser("root"))
    return client


@pytest.fixture
def shown(admin_client) -> dict[str, str]:
    """The change form as the admin's browser would post it back untouched."""
    response = admin_client.get(URL)
    assert response.status_code == 200
    return form_values(response.content.decode())


def errors_of(response) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    return dict(response.context["adminform"].form.errors)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "thresholds", ["[3600, NaN]", "[NaN]", "[3600, Infinity]", "[-Infinity, 3600]"]
)
def test_a_threshold_that_is_not_a_finite_number_is_a_form_error_not_a_500(
    admin_client, shown, thresholds
):
    response = admin_client.post(URL, {**shown, "queue_thresholds": thresholds})

    assert response.status_code == 200  # the form again, with the error
    assert "queue_thresholds" in errors_of(response)
    assert "finite" in errors_of(response)["queue_thresholds"][0]
    assert SchedulerConfig.objects.get(pk=1).queue_thresholds == list(DEFAULT_QUEUE_THRESHOLDS)
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_an_untouched_save_changes_nothing(admin_client, shown):
    response = admin_client.post(URL, shown)

    assert response.status_code == 302
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_saving_keeps_a_change_another_admin_made_meanwhile(admin_client, shown):
    scheduler_config_update(actor=superuser("root2"), changes={"fairness": 0.25})

    response = admin_client.post(URL, {**shown, "round_interval_seconds": "30"})

    assert response.status_code == 302
    config = SchedulerConfig.objects.get(pk=1)
    assert (config.fairness, config.round_interval_seconds) == (0.25, 30.0)
    assert list(AuditEntry.objects.order_by("id").values_list("actor_username", "field")) == [
        ("root2", "fairness"),
        ("root", "round_interval_seconds"),
    ]


@pytest.mark.django_db
def test_a_setting_both_admins_changed_is_refused_as_a_conflict(admin_client, shown):
    scheduler_config_update(actor=superuser("root2"), changes={"fairness": 0.25})

    response = admin_client.post(URL, {**shown, "fairness": "0.5"})

    assert response.status_code == 200
    assert "Someone else changed this to “0.25”" in errors_of(response)["fairness"][0]
    assert SchedulerConfig.objects.get(pk=1).fairness == 0.25
    assert not AuditEntry.objects.filter(actor_username="root").exists()

    again = form_values(response.content.decode())  # now remembers 0.25: an override
    assert admin_client.post(URL, again).status_code == 302
    assert SchedulerConfig.objects.get(pk=1).fairness == 0.5


@pytest.mark.django_db
def test_saving_a_margin_no_queue_gap_can_reach_warns_but_saves(admin_client, shown):
    response = admin_client.post(
        URL, {**shown, "queue_thresholds": "[3600]", "preempt_margin": "3"}, follow=True
    )

    assert response.status_code == 200
    config = SchedulerConfig.objects.get(pk=1)
    assert (config.queue_thresholds, config.preempt_margin) == ([3600], 3)
    warnings = [str(message) for message in response.context["messages"]]
    assert any("preemption is off except for" in warning for warning in warnings)
