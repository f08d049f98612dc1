"""Group coordinators (Slurm's account coordinators, product feature 30's group admin).

pat coordinates group vision without being a member. Every page and endpoint that shows or
touches jobs lets pat see and act on the jobs charged to vision, and nothing else: not
alice's job charged to nlp (she is in both groups), not carol's nlp job, not the token of
a vision member's session. bob, a plain vision member, still sees only his own jobs.
"""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from accounts.models import AuditEntry, LabGroup, User
from accounts.services import lab_group_members_set, lab_group_save, user_create
from jobs.choices import JobState
from jobs.idle_services import job_idle_keep, jobs_idle_sweep
from jobs.models import Job, JobArray, JobEvent
from jobs.selectors import job_seen_by, texts_for_viewer
from tests.dashboard.helpers import device, hold, logged_in
from tests.factories import JobFactory
from tests.jobs.test_idle_reaping import reaping, used  # noqa: F401 (reaping: a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def coordinator(vision: LabGroup, lab_admin: User) -> User:
    """pat: coordinates vision, belongs to no group."""
    pat = user_create(username="pat", password="pw-pat-123", groups=[])
    lab_group_members_set(
        actor=lab_admin, group=vision, members=vision.members.all(), coordinators=[pat]
    )
    return User.objects.get(pk=pat.pk)  # a fresh instance: its groups are read once


@pytest.fixture
def jobs(owner, teammate, outsider, vision, nlp) -> dict[str, Job]:
    """One pending job per case, each with a queue position (the last round's order)."""
    owner.lab_groups.add(nlp)
    return {
        "alice_vision": JobFactory(owner=owner, group=vision, name="a-vis", queue_position=1),
        "alice_nlp": JobFactory(owner=owner, group=nlp, name="a-nlp", queue_position=2),
        "alice_nogroup": JobFactory(owner=owner, group=None, name="a-none", queue_position=3),
        "bob_vision": JobFactory(owner=teammate, group=vision, name="b-vis", queue_position=4),
        "carol_nlp": JobFactory(owner=outsider, group=nlp, name="c-nlp", queue_position=5),
    }


def _ids(jobs: dict[str, Job], *names: str) -> set[int]:
    return {jobs[name].pk for name in names}


# ------------------------------------------------------------------------------ seeing


def test_the_api_lists_a_coordinators_own_and_group_jobs_only(coordinator, teammate, jobs, api_as):
    own = JobFactory(owner=coordinator, group=None, name="p-own")

    listed = {row["id"] for row in api_as(coordinator).get("/api/v1/jobs/").json()["results"]}

    assert listed == _ids(jobs, "alice_vision", "bob_vision") | {own.pk}
    # A plain member of the group is not a coordinator: bob sees his own job only.
    bobs = {row["id"] for row in api_as(teammate).get("/api/v1/jobs/").json()["results"]}
    assert bobs == _ids(jobs, "bob_vision")


def test_the_api_job_and_its_logs_are_visible_for_the_group_and_404_otherwise(
    coordinator, jobs, api_as
):
    client = api_as(coordinator)
    for name in ("alice_vision", "bob_vision"):
        job_id = jobs[name].pk
        assert client.get(f"/api/v1/jobs/{job_id}/").json()["owner"] in {"alice", "bob"}
        # Pending, so no log yet: the answer says so, not that the job does not exist.
        logs = client.get(f"/api/v1/agents/jobs/{job_id}/logs/").json()
        assert logs["detail"] != f"Job {job_id} not found."
    for name in ("alice_nlp", "alice_nogroup", "carol_nlp"):
        job_id = jobs[name].pk
        assert client.get(f"/api/v1/jobs/{job_id}/").status_code == 404
        logs = client.get(f"/api/v1/agents/jobs/{job_id}/logs/")
        assert (logs.status_code, logs.json()["detail"]) == (404, f"Job {job_id} not found.")


def test_the_jobs_page_shows_owners_and_the_job_page_opens_for_the_group(coordinator, owner, jobs):
    client = logged_in(coordinator)
    page = client.get("/jobs/").content.decode()

    assert "My jobs and my groups' jobs" in page
    assert '<th scope="col">Owner</th>' in page
    assert "a-vis" in page and "b-vis" in page
    assert "a-nlp" not in page and "c-nlp" not in page and "a-none" not in page
    assert client.get(f"/jobs/{jobs['bob_vision'].pk}/").status_code == 200
    assert client.get(f"/jobs/{jobs['carol_nlp'].pk}/").status_code == 404
    # alice sees her own jobs only, without an Owner column.
    alices = logged_in(owner).get("/jobs/").content.decode()
    assert '<th scope="col">Owner</th>' not in alices and "b-vis" not in alices


def test_the_queue_names_the_groups_jobs_and_hides_the_rest(coordinator, teammate, jobs, api_as):
    pending = api_as(coordinator).get("/api/v1/queue/").json()["pending"]

    named = {entry["job_id"] for entry in pending if entry["job_id"] is not None}
    assert named == _ids(jobs, "alice_vision", "bob_vision")
    hidden = [entry for entry in pending if entry["job_id"] is None]
    assert len(hidden) == 3 and all(entry["owner"] == "" for entry in hidden)
    # bob's view of the same queue: only his own job is named.
    bobs = api_as(teammate).get("/api/v1/queue/").json()["pending"]
    assert {entry["job_id"] for entry in bobs} - {None} == _ids(jobs, "bob_vision")


def test_the_cluster_shows_who_holds_a_gpu_for_the_groups_jobs_only(
    coordinator, owner, outsider, vision, nlp, small_cluster, api_as
):
    ours = hold(owner, [device(small_cluster, "a0", 0)], group=vision)
    theirs = hold(outsider, [device(small_cluster, "a0", 1)], group=nlp)

    nodes = api_as(coordinator).get("/api/v1/cluster/").json()["nodes"]

    holders = {d["index"]: d["job_id"] for n in nodes if n["name"] == "a0" for d in n["devices"]}
    assert holders[0] == ours.pk
    assert holders[1] is None and theirs.pk not in holders.values()


def test_reasons_name_the_groups_jobs_and_hide_other_jobs(coordinator, jobs):
    text = f"Behind: job {jobs['bob_vision'].pk} and job {jobs['carol_nlp'].pk} are ahead"

    [shown] = texts_for_viewer([text], user=coordinator)

    assert shown == f"Behind: job {jobs['bob_vision'].pk} and another job are ahead"


def test_job_seen_by_is_the_same_rule_as_the_list(coordinator, teammate, jobs):
    for job in jobs.values():
        listed = job.group is not None and job.group.name == "vision"
        assert job_seen_by(coordinator, owner_id=job.owner_id, group_id=job.group_id) is listed
        assert job_seen_by(teammate, owner_id=job.owner_id, group_id=job.group_id) is (
            job.owner_id == teammate.pk
        )


def test_a_coordinator_sees_the_groups_quota_but_not_other_groups(coordinator, jobs, api_as):
    accounts = api_as(coordinator).get("/api/v1/quotas/").json()["accounts"]

    assert [(a["kind"], a["name"]) for a in accounts] == [("user", "pat"), ("group", "vision")]


def test_the_idle_list_has_the_groups_running_jobs(
    coordinator, owner, outsider, vision, nlp, small_cluster, api_as
):
    now = timezone.now()
    ours = hold(
        owner, [device(small_cluster, "a0", 0)], group=vision, start=now - timedelta(hours=1)
    )
    theirs = hold(outsider, [device(small_cluster, "a0", 1)], group=nlp, start=ours.started_at)
    for job, index in ((ours, 0), (theirs, 1)):
        used(
            job,
            device(small_cluster, "a0", index),
            0.0,
            since=now - timedelta(minutes=30),
            minutes=30,
        )

    idle = api_as(coordinator).get("/api/v1/utilization/").json()["idle_allocated"]["jobs"]

    assert [(row["job_id"], row["owner"]) for row in idle] == [(ours.pk, "alice")]


def test_a_session_shows_its_address_but_not_its_token_to_the_coordinator(
    coordinator, owner, vision, small_cluster, api_as
):
    session = hold(owner, [device(small_cluster, "a0", 0)], group=vision)
    Job.objects.filter(pk=session.pk).update(
        interactive=True, session_port=30000, session_token="s3cret-token"
    )

    shown = api_as(coordinator).get(f"/api/v1/jobs/{session.pk}/").json()["session"]
    page = logged_in(coordinator).get(f"/jobs/{session.pk}/").content.decode()

    assert shown["port"] == 30000 and shown["token"] is None
    assert "s3cret-token" not in page
    assert api_as(owner).get(f"/api/v1/jobs/{session.pk}/").json()["session"]["token"] == (
        "s3cret-token"
    )


# ------------------------------------------------------------------------------ acting


def test_a_coordinator_cancels_a_groups_job_and_the_history_says_so(coordinator, jobs, api_as):
    client = api_as(coordinator)

    response = client.post(f"/api/v1/jobs/{jobs['bob_vision'].pk}/cancel/")

    assert response.status_code == 200 and response.json()["state"] == JobState.CANCELLED
    messages = JobEvent.objects.filter(job=jobs["bob_vision"]).values_list("message", flat=True)
    assert "Cancelled by a coordinator of group vision (pat)." in messages
    for name in ("alice_nlp", "carol_nlp"):
        assert client.post(f"/api/v1/jobs/{jobs[name].pk}/cancel/").status_code == 404
        assert Job.objects.get(pk=jobs[name].pk).state == JobState.PENDING


def test_a_member_cannot_cancel_a_teammates_job(teammate, jobs, api_as):
    response = api_as(teammate).post(f"/api/v1/jobs/{jobs['alice_vision'].pk}/cancel/")

    assert response.status_code == 404
    assert Job.objects.get(pk=jobs["alice_vision"].pk).state == JobState.PENDING


def test_a_coordinator_cancels_a_groups_array_but_not_another_groups(
    coordinator, owner, outsider, vision, nlp, api_as
):
    def array_of(user: User, group: LabGroup) -> JobArray:
        array = JobArray.objects.create(owner=user, size=2)
        for index in range(2):
            JobFactory(owner=user, group=group, array=array, array_index=index)
        return array

    ours, theirs = array_of(owner, vision), array_of(outsider, nlp)
    client = api_as(coordinator)

    assert client.post(f"/api/v1/arrays/{ours.pk}/cancel/").status_code == 200
    assert client.post(f"/api/v1/arrays/{theirs.pk}/cancel/").status_code == 404
    assert set(Job.objects.filter(array=ours).values_list("state", flat=True)) == {
        JobState.CANCELLED
    }
    assert set(Job.objects.filter(array=theirs).values_list("state", flat=True)) == {
        JobState.PENDING
    }


def test_a_coordinator_keeps_a_groups_idle_job_and_a_member_may_not(
    coordinator,
    owner,
    teammate,
    outsider,
    vision,
    nlp,
    small_cluster,
    reaping,  # noqa: F811
):
    now = timezone.now()
    start = now - timedelta(minutes=90)
    ours = hold(teammate, [device(small_cluster, "a0", 0)], group=vision, start=start)
    theirs = hold(outsider, [device(small_cluster, "a0", 1)], group=nlp, start=start)
    for job, index in ((ours, 0), (theirs, 1)):
        used(job, device(small_cluster, "a0", index), 0.0, since=start, minutes=90)
    jobs_idle_sweep(now=now)

    page = logged_in(coordinator).get(f"/jobs/{ours.pk}/").content.decode()
    assert f"/jobs/{ours.pk}/keep/" in page
    bobs_page = logged_in(teammate).get(f"/jobs/{ours.pk}/").content.decode()
    assert f"/jobs/{ours.pk}/keep/" not in bobs_page
    assert "ask a lab admin or a coordinator of group vision to keep it running" in bobs_page

    with pytest.raises(PermissionDenied):
        job_idle_keep(job_id=ours.pk, by=teammate, hours=24)
    response = logged_in(coordinator).post(f"/jobs/{ours.pk}/keep/", {"hours": "24"})
    assert response.status_code == 302
    assert Job.objects.get(pk=ours.pk).idle_exempt_until > now + timedelta(hours=23)
    assert (
        logged_in(coordinator).post(f"/jobs/{theirs.pk}/keep/", {"hours": "24"}).status_code == 404
    )
    assert Job.objects.get(pk=theirs.pk).idle_exempt_until is None


def test_a_coordinator_who_is_a_member_cannot_keep_their_own_idle_job(
    coordinator,
    vision,
    small_cluster,
    reaping,  # noqa: F811
):
    vision.members.add(coordinator)
    start = timezone.now() - timedelta(minutes=90)
    own = hold(coordinator, [device(small_cluster, "a0", 0)], group=vision, start=start)
    used(own, device(small_cluster, "a0", 0), 0.0, since=start, minutes=90)
    jobs_idle_sweep(now=timezone.now())

    with pytest.raises(PermissionDenied):
        job_idle_keep(job_id=own.pk, by=coordinator, hours=24)
    assert (
        f"/jobs/{own.pk}/keep/"
        not in logged_in(coordinator).get(f"/jobs/{own.pk}/").content.decode()
    )


def test_a_coordinator_may_not_wait_for_a_groups_job(coordinator, small_cluster, jobs, api_as):
    response = api_as(coordinator).post(
        "/api/v1/jobs/",
        {"image": "busybox", "command": ["true"], "depends_on": [jobs["bob_vision"].pk]},
        format="json",
    )

    assert response.status_code == 400
    assert f"No job {jobs['bob_vision'].pk} of yours." in str(response.json())


def test_cloning_a_groups_job_leaves_out_what_the_coordinator_may_not_see(coordinator, owner, jobs):
    waiting = jobs["alice_vision"]
    waiting.depends_on.add(jobs["alice_nlp"])
    Job.objects.filter(pk=waiting.pk).update(notify="end")
    owner.email = "alice@private.example"
    owner.save(update_fields=["email"])
    client = logged_in(coordinator)

    form = html.unescape(client.get(f"/jobs/submit/?clone={waiting.pk}").content.decode())
    page = client.get(f"/jobs/{waiting.pk}/").content.decode()

    assert f'value="{jobs["alice_nlp"].pk}"' not in form
    assert "It waits for 1 job of its owner's, which yours cannot wait for: left out." in form
    assert "alice@private.example" not in page and "When it ends, to its owner" in page
    assert "alice@private.example" in logged_in(owner).get(f"/jobs/{waiting.pk}/").content.decode()


def test_a_coordinator_removed_from_the_group_loses_its_jobs(
    coordinator, vision, lab_admin, jobs, api_as
):
    lab_group_members_set(
        actor=lab_admin, group=vision, members=vision.members.all(), coordinators=[]
    )

    client = api_as(User.objects.get(pk=coordinator.pk))
    assert client.get("/api/v1/jobs/").json()["results"] == []
    assert client.post(f"/api/v1/jobs/{jobs['bob_vision'].pk}/cancel/").status_code == 404


# ------------------------------------------------------------------------------ naming


def test_naming_coordinators_is_audited_and_for_lab_admins_only(owner, teammate, lab_admin, vision):
    with pytest.raises(PermissionDenied):
        lab_group_members_set(actor=owner, group=vision, members=[owner], coordinators=[owner])

    written = lab_group_members_set(
        actor=lab_admin, group=vision, members=[owner, teammate], coordinators=[owner]
    )

    assert [(e.field, e.old_value, e.new_value) for e in written] == [
        ("coordinators", "[]", '["alice"]')
    ]
    assert list(vision.coordinators.values_list("username", flat=True)) == ["alice"]
    # Leaving coordinators out (None) leaves them as they are.
    lab_group_members_set(actor=lab_admin, group=vision, members=[owner])
    assert list(vision.coordinators.values_list("username", flat=True)) == ["alice"]


def test_the_group_admin_page_sets_coordinators_and_audits_the_webhook_by_host_only(
    owner, teammate, lab_admin, vision
):
    secret = "https://hooks.slack.com/services/T000/B000/very-secret"
    response = logged_in(lab_admin).post(
        f"/admin/accounts/labgroup/{vision.pk}/change/",
        {
            "name": "vision",
            "description": "",
            "members": [str(owner.pk), str(teammate.pk)],
            "coordinators": [str(teammate.pk)],
            "webhook_url": secret,
            "usage": "0",
            "type_quotas-TOTAL_FORMS": "0",
            "type_quotas-INITIAL_FORMS": "0",
            "type_quotas-MIN_NUM_FORMS": "0",
            "type_quotas-MAX_NUM_FORMS": "1000",
        },
    )

    assert response.status_code == 302
    vision.refresh_from_db()
    assert vision.webhook_url == secret
    assert list(vision.coordinators.values_list("username", flat=True)) == ["bob"]
    logged = {
        e.field: (e.old_value, e.new_value)
        for e in AuditEntry.objects.filter(target_kind="group", target_id=vision.pk)
    }
    assert logged == {
        "coordinators": ("[]", '["bob"]'),
        "webhook_url": ("", "https://hooks.slack.com/…"),
    }
    assert not AuditEntry.objects.filter(new_value__contains="very-secret").exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://gpulab:s3cr3t-pass@hooks.example.com:8443/incoming/s3cr3t-pass",
        "https://hooks.example.com:8443?token=s3cr3t-pass",
    ],
)
def test_the_audit_keeps_no_password_path_or_query_of_a_webhook(url, lab_admin, vision):
    vision.webhook_url = url

    (entry,) = lab_group_save(actor=lab_admin, group=vision)

    assert entry.new_value == "https://hooks.example.com:8443/…"


def test_the_audit_keeps_an_ipv6_webhook_host_in_brackets(lab_admin, vision):
    vision.webhook_url = "https://[2001:db8::1]:8443/hooks/secret"

    (entry,) = lab_group_save(actor=lab_admin, group=vision)

    assert entry.new_value == "https://[2001:db8::1]:8443/…"


def test_a_webhook_port_out_of_range_is_a_form_error(lab_admin, vision):
    response = logged_in(lab_admin).post(
        f"/admin/accounts/labgroup/{vision.pk}/change/",
        {
            "name": "vision",
            "description": "",
            "webhook_url": "https://hooks.example.com:99999/x",
            "usage": "0",
            "type_quotas-TOTAL_FORMS": "0",
            "type_quotas-INITIAL_FORMS": "0",
            "type_quotas-MIN_NUM_FORMS": "0",
            "type_quotas-MAX_NUM_FORMS": "1000",
        },
    )

    assert response.status_code == 200
    assert "the port must be 0 to 65535" in response.content.decode()
    assert LabGroup.objects.get(pk=vision.pk).webhook_url == ""


def test_a_webhook_must_be_http_and_only_admins_save_a_group(owner, lab_admin, vision):
    vision.webhook_url = "ftp://example.org/hook"
    with pytest.raises(Exception, match="Enter a valid URL"):
        vision.full_clean()

    with pytest.raises(PermissionDenied):
        lab_group_save(actor=owner, group=vision)
    vision.webhook_url = ""
    assert lab_group_save(actor=lab_admin, group=vision) == []


def test_the_queue_and_cluster_pages_name_the_groups_jobs(
    coordinator, owner, outsider, vision, nlp, small_cluster, jobs
):
    held = hold(owner, [device(small_cluster, "a0", 0)], group=vision)
    other = hold(outsider, [device(small_cluster, "a0", 1)], group=nlp)
    client = logged_in(coordinator)

    queue = client.get("/queue/").content.decode()
    cluster = client.get("/cluster/").content.decode()

    assert "b-vis" in queue and "c-nlp" not in queue
    assert f"/jobs/{held.pk}/" in cluster and f"/jobs/{other.pk}/" not in cluster
