"""Guaranteed GPUs per group: the editor, the service's rules, the snapshot, a live round."""

from __future__ import annotations

import pytest
from django.utils import timezone

from accounts.models import AuditEntry, LabGroup
from accounts.services import group_quota_update, user_quota_update
from agents.simulated import simulated_tick
from config.errors import ValidationFailed
from jobs.choices import JobState
from jobs.models import JobEvent
from jobs.services import JobSpec, job_submit
from scheduler.core.types import SchedulerSettings
from scheduler.services import scheduling_round_run
from scheduler.snapshot import snapshot_build
from tests.dashboard.helpers import logged_in
from tests.scheduler.livefixtures import (
    age_job,
    assert_consistent,
    configure_tiresias_rules,
    simulated_cluster,
)

LIMITS = {"weight": "2", "max_gpus": "", "max_running_jobs": "", "max_pending_jobs": ""}


@pytest.mark.django_db
def test_an_admin_sets_a_groups_guarantee_on_the_editor_and_it_is_audited(
    vision, nlp, lab_admin, small_cluster
):
    client = logged_in(lab_admin)
    page = client.get(f"/manage/quotas/groups/{vision.pk}/").content.decode()
    assert 'name="guaranteed_gpus"' in page

    response = client.post(
        f"/manage/quotas/groups/{vision.pk}/", {**LIMITS, "max_gpus": "8", "guaranteed_gpus": "4"}
    )

    assert response.status_code == 302
    vision.refresh_from_db()
    assert (vision.guaranteed_gpus, vision.max_gpus) == (4, 8)
    fields = {(e.field, e.old_value, e.new_value) for e in AuditEntry.objects.all()}
    assert ("guaranteed_gpus", "", "4") in fields
    listing = client.get("/manage/quotas/").content.decode()
    assert "Guaranteed GPUs" in listing
    assert "Guarantees now add up to 4 of the 10 GPUs in the cluster." in listing
    assert "more GPUs than the cluster has" not in listing
    history = client.get(f"/manage/quotas/groups/{vision.pk}/").content.decode()
    assert "guaranteed_gpus" in history


@pytest.mark.django_db
def test_a_user_form_has_no_guarantee(owner, lab_admin):
    page = logged_in(lab_admin).get(f"/manage/quotas/users/{owner.pk}/").content.decode()
    assert 'name="guaranteed_gpus"' not in page
    with pytest.raises(ValidationFailed) as failure:
        user_quota_update(actor=lab_admin, user_id=owner.pk, changes={"guaranteed_gpus": 2})
    assert list(failure.value.errors) == ["guaranteed_gpus"]


@pytest.mark.django_db
def test_a_guarantee_above_the_groups_cap_names_the_field_and_saves_nothing(vision, lab_admin):
    response = logged_in(lab_admin).post(
        f"/manage/quotas/groups/{vision.pk}/", {**LIMITS, "max_gpus": "2", "guaranteed_gpus": "4"}
    )

    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["guaranteed_gpus"]
    assert "cannot exceed the group&#x27;s max GPUs (2)" in response.content.decode()
    vision.refresh_from_db()
    assert (vision.guaranteed_gpus, vision.max_gpus) == (None, None)
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_lowering_the_cap_below_the_guarantee_is_refused_too(vision, lab_admin):
    group_quota_update(
        actor=lab_admin, group_id=vision.pk, changes={"guaranteed_gpus": 4, "max_gpus": 8}
    )
    with pytest.raises(ValidationFailed) as failure:
        group_quota_update(actor=lab_admin, group_id=vision.pk, changes={"max_gpus": 3})
    assert list(failure.value.errors) == ["guaranteed_gpus"]
    vision.refresh_from_db()
    assert vision.max_gpus == 8
    # Both at once, consistent: fine.
    group_quota_update(
        actor=lab_admin, group_id=vision.pk, changes={"guaranteed_gpus": 2, "max_gpus": 3}
    )
    vision.refresh_from_db()
    assert (vision.guaranteed_gpus, vision.max_gpus) == (2, 3)


@pytest.mark.django_db
def test_guarantees_beyond_the_cluster_are_flagged_on_the_list(
    vision, nlp, lab_admin, small_cluster
):
    LabGroup.objects.filter(pk=vision.pk).update(guaranteed_gpus=8)
    LabGroup.objects.filter(pk=nlp.pk).update(guaranteed_gpus=4)
    listing = logged_in(lab_admin).get("/manage/quotas/").content.decode()
    assert "Guarantees now add up to 12 of the 10 GPUs in the cluster." in listing
    assert "more GPUs than the cluster has" in listing


# ----------------------------------------------------------------------------- live round


def submit(user, gpus: int):  # type: ignore[no-untyped-def]
    spec = JobSpec(image="pytorch/pytorch:2.4.0", command=["sleep", "86400"], num_gpus=gpus)
    return job_submit(owner=user, spec=spec)


@pytest.mark.django_db
@pytest.mark.parametrize("guaranteed", [4, None])
def test_a_round_reclaims_a_groups_guarantee_from_a_borrower(owner, outsider, vision, guaranteed):
    """Carol's nlp job holds all 4 GPUs, in queue 0 like alice's new job: LAS would not
    preempt it (the control, guarantee None); vision's guarantee does."""
    configure_tiresias_rules()
    simulated_cluster(nodes=1, gpus_per_node=4)
    LabGroup.objects.filter(pk=vision.pk).update(guaranteed_gpus=guaranteed)
    borrower = submit(outsider, 4)
    scheduling_round_run()
    simulated_tick(grace_seconds=0)
    age_job(borrower.pk, seconds=400)  # past its minimum runtime, 1,600 GPU-s: queue 0
    newcomer = submit(owner, 4)
    assert newcomer.group == vision

    snapshot, _ = snapshot_build(now=newcomer.submitted_at, settings=SchedulerSettings())
    assert snapshot.group_by_name["vision"].guaranteed_gpus == (guaranteed or 0)

    scheduling_round_run()
    borrower.refresh_from_db()
    if guaranteed is None:
        assert borrower.state == JobState.RUNNING
        return
    assert borrower.state == JobState.PREEMPTING
    event = JobEvent.objects.filter(job=borrower, to_state=JobState.PREEMPTING).get()
    assert f"job #{newcomer.pk}" in event.message
    assert "takes back GPUs its group is guaranteed" in event.message
    # While it checkpoints, its GPUs are on their way to the newcomer, which claims no more.
    assert borrower.preempted_for == newcomer.pk
    snapshot, _ = snapshot_build(now=timezone.now(), settings=SchedulerSettings())
    assert [(s.id, s.for_job) for s in snapshot.stopping_jobs] == [(borrower.pk, newcomer.pk)]
    simulated_tick(grace_seconds=0)
    borrower.refresh_from_db()
    assert borrower.state == JobState.PENDING and borrower.preempted_for is None
    scheduling_round_run()
    newcomer.refresh_from_db()
    assert newcomer.state in {JobState.STARTING, JobState.RUNNING}
    assert_consistent()
