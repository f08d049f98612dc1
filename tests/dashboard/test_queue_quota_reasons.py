"""The queue keeps other people's quota caps to those who see their jobs in full.

A quota's reason carries its cap ("QuotaExceeded: user max GPUs 2"): carol's own limit and
her group's are hers (and her coordinators' and the admins') to know, not every student's
who reads the queue. Others see that the job is held by a quota, not by how much.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import User
from accounts.services import lab_group_members_set, user_create
from tests.dashboard.helpers import logged_in
from tests.factories import JobFactory

USER_CAP = "QuotaExceeded: user max GPUs 2"
GROUP_CAP = "QuotaExceeded: group max a100 GPUs 3"


@pytest.fixture
def capped(owner, outsider, nlp):
    """Two of carol's jobs held by quotas, and one of alice's held by hers."""
    now = timezone.now()
    for position, reason in ((1, USER_CAP), (2, GROUP_CAP)):
        JobFactory(
            owner=outsider,
            group=nlp,
            name=f"carol-{position}",
            queue_position=position,
            reason=reason,
            pending_since=now - timedelta(minutes=position),
        )
    JobFactory(
        owner=owner,
        name="alice-1",
        queue_position=3,
        reason="QuotaExceeded: user max GPUs 1",
        pending_since=now,
    )


@pytest.fixture
def nlp_coordinator(nlp, lab_admin) -> User:
    pat = user_create(username="pat", password="pw-pat-123", groups=[])
    lab_group_members_set(actor=lab_admin, group=nlp, members=nlp.members.all(), coordinators=[pat])
    return User.objects.get(pk=pat.pk)


def _page(user: User) -> str:
    return logged_in(user).get("/queue/").content.decode()


@pytest.mark.django_db
def test_a_student_sees_that_others_are_held_by_a_quota_but_not_their_caps(owner, capped, api_as):
    html = _page(owner)
    assert "max GPUs 2" not in html and "max a100 GPUs 3" not in html
    assert html.count('<td title="QuotaExceeded">Held by a quota</td>') == 2
    # Her own job's cap is hers to know, on the page and in "Your pending jobs".
    assert "Held by a quota: user max GPUs 1" in html

    data = api_as(owner).get("/api/v1/queue/").json()
    carols = [entry for entry in data["pending"] if entry["job_id"] is None]
    assert [(e["reason"], e["reason_words"]) for e in carols] == [
        ("QuotaExceeded", "Held by a quota"),
        ("QuotaExceeded", "Held by a quota"),
    ]
    assert "max GPUs 2" not in str(data) and "a100 GPUs 3" not in str(data)
    assert data["mine"][0]["reason"] == "QuotaExceeded: user max GPUs 1"


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["outsider", "lab_admin", "nlp_coordinator"])
def test_the_owner_her_coordinators_and_admins_see_the_caps(persona, capped, api_as, request):
    viewer = request.getfixturevalue(persona)
    html = _page(viewer)
    assert "Held by a quota: user max GPUs 2" in html
    assert "Held by a quota: group max a100 GPUs 3" in html

    reasons = [entry["reason"] for entry in api_as(viewer).get("/api/v1/queue/").json()["pending"]]
    assert reasons[:2] == [USER_CAP, GROUP_CAP]


@pytest.mark.django_db
def test_other_reasons_of_others_jobs_keep_their_detail(owner, outsider, nlp, api_as):
    JobFactory(
        owner=outsider,
        group=nlp,
        queue_position=1,
        reason="WaitingForResources: needs 4 × a100 on one node",
        pending_since=timezone.now(),
    )
    (entry,) = api_as(owner).get("/api/v1/queue/").json()["pending"]
    assert entry["reason_words"] == "Waiting for free GPUs: needs 4 × a100 on one node"


def test_a_capacity_reason_loses_the_limits_a_quota_adds_for_others():
    from dashboard.selectors.queue import reason_for_outsider

    narrowed = (
        "WaitingForResources: needs 1 × a100/v100; quota rules out a100 (user max a100 GPUs 1)"
    )
    assert reason_for_outsider(narrowed) == (
        "WaitingForResources: needs 1 × a100/v100; a quota rules out some of its types"
    )
    plain = "WaitingForResources: needs 1 × a100/v100"
    assert reason_for_outsider(plain) == plain
