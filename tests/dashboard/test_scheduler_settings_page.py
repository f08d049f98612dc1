"""The scheduler settings page and `scheduler_config_update` (admins only, audited)."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from accounts.models import AuditEntry
from config.errors import ValidationFailed
from scheduler.core.types import DEFAULT_QUEUE_THRESHOLDS
from scheduler.selectors import scheduler_config_get
from scheduler.settings_services import scheduler_config_update
from tests.dashboard.helpers import logged_in
from tests.page_forms import form_values

URL = "/manage/scheduler/"
DEFAULT_THRESHOLDS = list(DEFAULT_QUEUE_THRESHOLDS)  # 3600, 7200, ..., 3,686,400 GPU-s
# The defaults, as the form posts them.
DEFAULTS = {
    "policy": "las",
    "placement": "allox",
    "queue_thresholds": ", ".join(str(int(value)) for value in DEFAULT_THRESHOLDS),
    "promote_knob": "4",
    "fairness": "1",
    "min_runtime_seconds": "300",
    "preempt_patience_seconds": "600",
    "preempt_margin": "3",
    "max_victims": "1",
    "starvation_seconds": "3600",
    "restore_cost_seconds": "30",
    "allox_alpha": "0.5",
    "allox_window": "50",
    "allox_efficiency_gate": "1",
    "round_interval_seconds": "10",
    "preemption_grace_seconds": "30",
    # idle_reap: off, so an unticked box that posts nothing
    "idle_threshold_pct": "5",
    "idle_window_minutes": "60",
    "idle_grace_minutes": "60",
    "session_idle_minutes": "120",
}


@pytest.mark.django_db
def test_students_get_403_and_change_nothing(owner):
    client = logged_in(owner)

    assert client.get(URL).status_code == 403
    assert client.post(URL, {**DEFAULTS, "policy": "fifo"}).status_code == 403
    assert scheduler_config_get().policy == "las"
    with pytest.raises(PermissionDenied):
        scheduler_config_update(actor=owner, changes={"policy": "fifo"})
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_anonymous_visitors_are_sent_to_login():
    response = Client().get(URL)
    assert response.status_code == 302 and response.url.startswith("/login/")


@pytest.mark.django_db
def test_the_page_shows_current_values_and_the_models_explanations(lab_admin):
    response = logged_in(lab_admin).get(URL)

    html = response.content.decode()
    assert response.status_code == 200
    assert 'value="3600, 7200, 14400,' in html  # thresholds as comma-separated numbers
    assert "0 = arrival order, 1 = share first." in html  # fairness help_text
    assert "SIGTERM, then this long to checkpoint, then kill." in html
    assert "Current: <b>4.0</b>" in html  # promote_knob
    assert "Preemption patience (seconds)" in html
    assert "1 = any lower queue (Tiresias)." in html  # preempt_margin help text
    assert "0 = no limit." in html  # max_victims
    for name in DEFAULTS:
        assert f'name="{name}"' in html


@pytest.mark.django_db
def test_the_knobs_fifo_ignores_say_so_and_no_others(lab_admin):
    form = logged_in(lab_admin).get(URL).context["form"]
    marked = {name for name, field in form.fields.items() if "fifo ignores it" in field.help_text}
    assert marked == {
        "queue_thresholds",
        "promote_knob",
        "fairness",
        "min_runtime_seconds",
        "preempt_patience_seconds",
        "preempt_margin",
        "max_victims",
        "starvation_seconds",
    }


@pytest.mark.django_db
def test_saving_changes_reaches_the_next_config_read_and_is_audited(lab_admin):
    response = logged_in(lab_admin).post(
        URL,
        {
            **DEFAULTS,
            "policy": "gittins",
            "queue_thresholds": "3600, 36000",
            "promote_knob": "",
            "fairness": "0.5",
        },
    )

    assert response.status_code == 302
    config = scheduler_config_get()
    assert config.policy == "gittins"
    assert config.queue_thresholds == [3600.0, 36000.0]
    assert config.promote_knob is None
    assert config.fairness == 0.5
    entries = {e.field: (e.old_value, e.new_value) for e in AuditEntry.objects.all()}
    assert entries == {
        "policy": ("las", "gittins"),
        "queue_thresholds": (str(DEFAULT_THRESHOLDS), "[3600.0, 36000.0]"),
        "promote_knob": ("4.0", ""),
        "fairness": ("1.0", "0.5"),
    }
    assert set(AuditEntry.objects.values_list("target_kind", "actor_username")) == {
        ("scheduler", "root")
    }


@pytest.mark.django_db
def test_posting_the_current_values_writes_nothing(lab_admin):
    scheduler_config_get()

    response = logged_in(lab_admin).post(URL, DEFAULTS)

    assert response.status_code == 302
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"queue_thresholds": "36000, 3600"}, "queue_thresholds"),  # not ascending
        ({"queue_thresholds": "3600, 3600"}, "queue_thresholds"),  # not strictly
        ({"queue_thresholds": "-5"}, "queue_thresholds"),
        ({"queue_thresholds": "one hour"}, "queue_thresholds"),
        ({"fairness": "1.5"}, "fairness"),
        ({"fairness": "x"}, "fairness"),
        ({"allox_alpha": "0"}, "allox_alpha"),
        ({"allox_window": "0"}, "allox_window"),
        ({"round_interval_seconds": "0.5"}, "round_interval_seconds"),
        ({"min_runtime_seconds": "-1"}, "min_runtime_seconds"),
        ({"promote_knob": "-1"}, "promote_knob"),
        ({"policy": "srtf"}, "policy"),  # simulator-only
        ({"placement": "random"}, "placement"),
        ({"preemption_grace_seconds": "-3"}, "preemption_grace_seconds"),
        ({"preemption_grace_seconds": "3601"}, "preemption_grace_seconds"),  # stop task limit
        ({"preempt_patience_seconds": "-1"}, "preempt_patience_seconds"),
        ({"preempt_margin": "0"}, "preempt_margin"),
        ({"max_victims": "-1"}, "max_victims"),
        ({"starvation_seconds": "-60"}, "starvation_seconds"),
        ({"allox_efficiency_gate": "2"}, "allox_efficiency_gate"),
        # Upper bounds: 1e300 s of minimum runtime or round interval switched preemption or
        # the timer rounds off for good, saved and audited as if fine.
        ({"min_runtime_seconds": "1e300"}, "min_runtime_seconds"),
        ({"round_interval_seconds": "86400"}, "round_interval_seconds"),
        ({"starvation_seconds": "1e300"}, "starvation_seconds"),
        ({"restore_cost_seconds": "1e300"}, "restore_cost_seconds"),
        ({"queue_thresholds": "3600, 1e300"}, "queue_thresholds"),
    ],
)
def test_an_invalid_value_names_the_field_and_saves_nothing(lab_admin, changes, field):
    response = logged_in(lab_admin).post(URL, {**DEFAULTS, "policy": "fifo", **changes})

    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert f"{field}:" in response.content.decode()
    config = scheduler_config_get()
    assert config.policy == "las" and config.queue_thresholds == DEFAULT_THRESHOLDS
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_an_error_and_the_current_value_are_where_the_input_points(lab_admin):
    # One field template (`_field.html`) for every form: this page's errors had no id, so
    # a screen reader never tied them to their input.
    response = logged_in(lab_admin).post(URL, {**DEFAULTS, "preempt_margin": "0"})
    page = response.content.decode()
    described = re.search(r'<input[^>]*id="id_preempt_margin"[^>]*>', page)[0]  # type: ignore[index]
    ids = re.search(r'aria-describedby="([^"]*)"', described)[1].split()  # type: ignore[index]
    assert ids == ["id_preempt_margin_helptext", "id_preempt_margin_error"]
    error = re.search(r'<div id="id_preempt_margin_error">(.*?)</div>', page)[1]  # type: ignore[index]
    assert "preempt_margin:" in error
    helptext = re.search(r'<small id="id_preempt_margin_helptext">(.*?)</small>', page)[1]  # type: ignore[index]
    assert "Current: <b>3" in helptext


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"queue_thresholds": [7200, 3600]}, "queue_thresholds"),
        ({"queue_thresholds": "3600"}, "queue_thresholds"),
        ({"fairness": 2}, "fairness"),
        ({"fairness": "abc"}, "fairness"),
        ({"preempt_margin": 0}, "preempt_margin"),
        ({"preempt_patience_seconds": -1.0}, "preempt_patience_seconds"),
        ({"starvation_seconds": -60.0}, "starvation_seconds"),
        ({"allox_efficiency_gate": 1.5}, "allox_efficiency_gate"),
        ({"updated_at": None}, "updated_at"),
        ({"nonsense": 1}, "nonsense"),
    ],
)
def test_the_service_validates_with_the_models_rules(lab_admin, changes, field):
    with pytest.raises(ValidationFailed) as caught:
        scheduler_config_update(actor=lab_admin, changes={"policy": "fifo", **changes})

    assert field in caught.value.errors
    assert scheduler_config_get().policy == "las"
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_the_service_converts_text_and_logs_only_real_changes(lab_admin):
    entries = scheduler_config_update(
        actor=lab_admin, changes={"fairness": "1.0", "allox_window": "60"}
    )

    assert [(e.field, e.old_value, e.new_value) for e in entries] == [("allox_window", "50", "60")]
    assert scheduler_config_get().allox_window == 60


@pytest.mark.django_db
def test_changing_the_churn_control_knobs_audits_each_one(lab_admin):
    entries = scheduler_config_update(
        actor=lab_admin,
        changes={
            "preempt_patience_seconds": 0.0,
            "preempt_margin": 1,
            "max_victims": 0,
            "starvation_seconds": 7200.0,
        },
    )

    assert sorted((e.field, e.old_value, e.new_value) for e in entries) == [
        ("max_victims", "1", "0"),
        ("preempt_margin", "3", "1"),
        ("preempt_patience_seconds", "600.0", "0.0"),
        ("starvation_seconds", "3600.0", "7200.0"),
    ]
    assert AuditEntry.objects.count() == 4
    config = scheduler_config_get()
    assert (
        config.preempt_patience_seconds,
        config.preempt_margin,
        config.max_victims,
        config.starvation_seconds,
    ) == (0.0, 1, 0, 7200.0)


# --------------------------------------------------------------------------- two admins at once


@pytest.fixture
def second_admin(db):
    from accounts.choices import Role
    from accounts.services import user_create

    return user_create(username="root2", password="pw-root2-123", role=Role.ADMIN)


@pytest.mark.django_db
def test_the_page_remembers_what_it_showed_in_hidden_inputs(lab_admin):
    shown = form_values(logged_in(lab_admin).get(URL).content.decode())

    assert shown["initial-fairness"] == "1.0"
    assert shown["initial-queue_thresholds"].startswith("3600, 7200, ")
    assert shown["initial-promote_knob"] == "4.0"


@pytest.mark.django_db
def test_saving_keeps_a_change_another_admin_made_meanwhile(lab_admin, second_admin):
    scheduler_config_get()
    client = logged_in(lab_admin)
    data = form_values(client.get(URL).content.decode())  # root opens the page
    scheduler_config_update(actor=second_admin, changes={"fairness": 0.25})  # root2 saves

    data["round_interval_seconds"] = "30"  # root changes only the interval
    response = client.post(URL, data)

    assert response.status_code == 302
    config = scheduler_config_get()
    assert (config.fairness, config.round_interval_seconds) == (0.25, 30.0)
    assert list(AuditEntry.objects.order_by("id").values_list("actor_username", "field")) == [
        ("root2", "fairness"),
        ("root", "round_interval_seconds"),
    ]


@pytest.mark.django_db
def test_a_setting_both_admins_changed_is_refused_as_a_conflict_then_saved_on_purpose(
    lab_admin, second_admin
):
    scheduler_config_get()
    client = logged_in(lab_admin)
    data = form_values(client.get(URL).content.decode())
    scheduler_config_update(actor=second_admin, changes={"fairness": 0.25})

    data.update(fairness="0.5", round_interval_seconds="30")
    response = client.post(URL, data)

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["fairness"]
    assert "Someone else changed this to “0.25”" in errors["fairness"][0]
    assert "fairness: Someone else changed this" in response.content.decode()
    config = scheduler_config_get()
    assert (config.fairness, config.round_interval_seconds) == (0.25, 10.0)  # nothing saved
    assert "Current: <b>0.25</b>" in response.content.decode()
    assert not AuditEntry.objects.filter(actor_username="root").exists()

    # The re-shown page now remembers 0.25: saving it again is a deliberate override.
    again = form_values(response.content.decode())
    assert (again["fairness"], again["initial-fairness"]) == ("0.5", "0.25")
    assert client.post(URL, again).status_code == 302
    config = scheduler_config_get()
    assert (config.fairness, config.round_interval_seconds) == (0.5, 30.0)


@pytest.mark.django_db
def test_the_same_change_made_by_both_admins_is_no_conflict(lab_admin, second_admin):
    scheduler_config_get()
    client = logged_in(lab_admin)
    data = form_values(client.get(URL).content.decode())
    scheduler_config_update(actor=second_admin, changes={"fairness": 0.5})

    data["fairness"] = "0.5"
    assert client.post(URL, data).status_code == 302
    assert list(AuditEntry.objects.values_list("actor_username", flat=True)) == ["root2"]


# --------------------------------------------------------------------------- warnings

MARGIN_WARNING = "preemption is off except for"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("settings", "warned"),
    [
        ({}, False),  # defaults: 12 queues, margin 3
        ({"queue_thresholds": [3600.0], "preempt_margin": 3}, True),  # 2 queues
        ({"queue_thresholds": [3600.0], "preempt_margin": 2}, True),  # needs 3 queues
        ({"queue_thresholds": [3600.0], "preempt_margin": 1}, False),  # Tiresias' own rule
        ({"queue_thresholds": [3600.0, 7200.0], "preempt_margin": 2}, False),
        ({"queue_thresholds": [], "preempt_margin": 1}, True),  # one queue: nothing below
        # FIFO ignores queues and margin: nothing to warn about.
        ({"policy": "fifo", "queue_thresholds": [3600.0], "preempt_margin": 3}, False),
    ],
)
def test_a_margin_no_queue_gap_can_reach_is_allowed_but_warned_about(lab_admin, settings, warned):
    scheduler_config_update(actor=lab_admin, changes=settings)

    page = logged_in(lab_admin).get(URL).content.decode()

    assert (MARGIN_WARNING in page) is warned
    if warned:
        assert "the starvation guard" in page


@pytest.mark.django_db
def test_the_warning_appears_right_after_saving_such_a_margin(lab_admin):
    client = logged_in(lab_admin)
    data = form_values(client.get(URL).content.decode())
    data.update(queue_thresholds="3600", preempt_margin="3", starvation_seconds="0")

    response = client.post(URL, data, follow=True)

    assert scheduler_config_get().preempt_margin == 3  # saved: it may be intended
    page = response.content.decode()
    assert "The preemption margin (3) is not below the number of queues (2" in page
    assert "none at all: the starvation guard is off too" in page


@pytest.mark.django_db
def test_empty_thresholds_are_saved_as_one_queue(lab_admin):
    response = logged_in(lab_admin).post(URL, {**DEFAULTS, "queue_thresholds": ""})

    assert response.status_code == 302
    assert scheduler_config_get().queue_thresholds == []


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(
    "field",
    [
        "promote_knob",
        "fairness",
        "min_runtime_seconds",
        "preempt_patience_seconds",
        "starvation_seconds",
        "restore_cost_seconds",
        "allox_alpha",
        "allox_efficiency_gate",
        "round_interval_seconds",
    ],
)
def test_the_service_refuses_a_float_setting_that_is_not_finite(lab_admin, field, value):
    # Every comparison with NaN is false: the min/max validators let it through, and the
    # table's check constraints (or a policy) met it instead.
    with pytest.raises(ValidationFailed) as caught:
        scheduler_config_update(actor=lab_admin, changes={field: value})

    assert field in caught.value.errors
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_the_sessions_idle_window_is_set_on_the_page_and_refused_under_five(lab_admin):
    client = logged_in(lab_admin)
    assert "Idle window of interactive sessions" in client.get(URL).content.decode()
    assert client.post(URL, {**DEFAULTS, "session_idle_minutes": "3"}).status_code == 400
    assert scheduler_config_get().session_idle_minutes == 120
    assert client.post(URL, {**DEFAULTS, "session_idle_minutes": "0"}).status_code == 302
    assert scheduler_config_get().session_idle_minutes == 0
