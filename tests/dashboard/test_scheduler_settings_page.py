"""The scheduler settings page and `scheduler_config_update` (admins only, audited)."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from accounts.models import AuditEntry
from config.errors import ValidationFailed
from scheduler.core.types import DEFAULT_QUEUE_THRESHOLDS
from scheduler.selectors import scheduler_config_get
from scheduler.settings_services import scheduler_config_update
from tests.dashboard.helpers import logged_in

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
