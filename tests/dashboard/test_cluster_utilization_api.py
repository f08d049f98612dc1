"""GET /api/v1/cluster/ and /api/v1/utilization/: the pages' data, with the same rules on
who sees whose jobs and GPU-hours."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.models import GpuSample, JobGpuMinute
from cluster.choices import NodeState
from cluster.models import Node
from dashboard.services import aggregates_update, floor_hour
from jobs.choices import JobState
from tests.dashboard.helpers import device, hold

CLUSTER = "/api/v1/cluster/"
UTILIZATION = "/api/v1/utilization/"


def idle_minutes(job, gpu, pct):
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=2)
    JobGpuMinute.objects.create(
        job=job, device=gpu, minute=minute, samples=4, utilization_avg=pct, memory_used_max_mb=1
    )


def cells(body) -> dict[tuple[str, int], dict]:
    return {
        (node["name"], cell["index"]): cell for node in body["nodes"] for cell in node["devices"]
    }


# --------------------------------------------------------------------------- cluster


@pytest.mark.django_db
def test_the_cluster_api_lists_nodes_devices_readings_and_counts(
    api_as, lab_admin, owner, small_cluster
):
    job = hold(owner, [device(small_cluster, "a0", 0)])
    GpuSample.objects.create(
        device=device(small_cluster, "a0", 0),
        at=timezone.now() - timedelta(seconds=15),
        utilization_pct=88,
        memory_used_mb=2048,
        memory_total_mb=40960,
        temperature_c=71,
        xid_errors=[63],
    )
    Node.objects.filter(name="v0").update(state=NodeState.DOWN, state_reason="silent")

    response = api_as(lab_admin).get(CLUSTER)

    assert response.status_code == 200
    body = response.json()
    assert [node["name"] for node in body["nodes"]] == ["a0", "a1", "v0"]
    assert body["counts"] == {
        "total": 10,
        "allocated": 1,
        "stopping": 0,
        "free": 7,
        "out_of_service": 2,
        "held_back": 0,
    }
    v0 = body["nodes"][2]
    assert (v0["state"], v0["state_reason"], v0["runtime"]) == ("down", "silent", "process")
    held = cells(body)[("a0", 0)]
    assert (held["job_id"], held["job_owner"], held["allocated"]) == (job.pk, "alice", True)
    assert (held["utilization_pct"], held["memory_used_mb"], held["temperature_c"]) == (
        88,
        2048,
        71,
    )
    assert held["health"] == ["Xid 63"]
    free = cells(body)[("a1", 3)]
    assert (free["allocated"], free["job_id"], free["reading_at"]) == (False, None, None)


@pytest.mark.django_db
def test_a_student_sees_only_their_own_jobs_on_the_cluster(api_as, owner, teammate, small_cluster):
    mine = hold(owner, [device(small_cluster, "a0", 0)])
    hold(teammate, [device(small_cluster, "a0", 1)])

    body = api_as(owner).get(CLUSTER).json()

    own, other = cells(body)[("a0", 0)], cells(body)[("a0", 1)]
    assert (own["job_id"], own["job_owner"], own["mine"]) == (mine.pk, "alice", True)
    assert (other["allocated"], other["job_id"], other["job_owner"], other["mine"]) == (
        True,
        None,
        None,
        False,
    )
    assert "bob" not in str(body)


@pytest.mark.django_db
@pytest.mark.parametrize("path", [CLUSTER, UTILIZATION])
def test_the_apis_need_a_login(path):
    assert APIClient().get(path).status_code in (401, 403)


# --------------------------------------------------------------------------- utilization


@pytest.fixture
def usage(owner, teammate, outsider, vision, nlp, small_cluster):
    """Two hours ago, for one hour: alice 2 GPUs, bob 1 (vision), carol 3 (nlp). Now: an
    idle job of alice's and a busy one of bob's, with readings on the a100s."""
    hour = floor_hour(timezone.now()) - timedelta(hours=2)
    devices = iter(small_cluster)
    for user, group, count in ((owner, vision, 2), (teammate, vision, 1), (outsider, nlp, 3)):
        hold(
            user,
            [next(devices) for _ in range(count)],
            group=group,
            start=hour,
            end=hour + timedelta(hours=1),
            state=JobState.SUCCEEDED,
        )
    idle = hold(owner, [device(small_cluster, "a1", 2)])
    idle_minutes(idle, device(small_cluster, "a1", 2), 4.0)
    busy = hold(teammate, [device(small_cluster, "a1", 3)])
    idle_minutes(busy, device(small_cluster, "a1", 3), 4.0)
    now = timezone.now()
    for gpu, pct in ((device(small_cluster, "a1", 2), 4), (device(small_cluster, "a1", 3), 60)):
        GpuSample.objects.create(
            device=gpu,
            at=now - timedelta(seconds=10),
            utilization_pct=pct,
            memory_used_mb=1,
            memory_total_mb=2,
        )
    aggregates_update(now=now)
    return {"idle": idle, "busy": busy}


@pytest.mark.django_db
def test_an_admin_gets_series_usage_of_everyone_and_every_idle_job(api_as, lab_admin, usage):
    response = api_as(lab_admin).get(UTILIZATION, {"window": "24h"})

    assert response.status_code == 200
    body = response.json()
    assert (body["window"], body["bucket_seconds"]) == ("24h", 300)
    series = {one["device_type"]: one["points"] for one in body["series"]}
    assert [(p["devices"], p["allocated"], p["used"]) for p in series["a100"]] == [(8, 2.0, 0.64)]
    assert body["usage"]["period"] == "hour" and len(body["usage"]["periods"]) == 24
    totals = {one["label"]: one["total"] for one in body["usage"]["by_user"]}
    # The finished hour, plus half an hour of alice's and bob's running jobs.
    assert totals["alice"] == pytest.approx(2.5, abs=0.01)
    assert totals["carol"] == 3.0 and totals["bob"] == pytest.approx(1.5, abs=0.01)
    assert not any(one["others"] for one in body["usage"]["by_user"])
    groups = {one["label"]: one["total"] for one in body["usage"]["by_group"]}
    assert groups["nlp"] == 3.0
    idle = body["idle_allocated"]
    assert (idle["window_minutes"], idle["threshold_pct"], idle["running"]) == (15, 10.0, 2)
    assert {job["job_id"] for job in idle["jobs"]} == {usage["idle"].pk, usage["busy"].pk}
    assert {job["owner"] for job in idle["jobs"]} == {"alice", "bob"}


@pytest.mark.django_db
def test_a_student_gets_their_own_usage_others_summed_and_only_their_idle_jobs(
    api_as, owner, usage
):
    body = api_as(owner).get(UTILIZATION, {"window": "7d"}).json()

    assert body["usage"]["period"] == "day" and len(body["usage"]["periods"]) == 7
    by_user = body["usage"]["by_user"]
    assert [(one["label"], one["user"], one["mine"], one["others"]) for one in by_user] == [
        ("alice", "alice", True, False),
        ("Other users", None, False, True),
    ]
    # bob 1 + carol 3 in the finished hour, and bob's running job's half hour.
    assert by_user[0]["total"] == pytest.approx(2.5, abs=0.01)
    assert by_user[1]["total"] == pytest.approx(4.5, abs=0.01)
    # Groups are public; the running jobs were charged to none.
    assert {one["label"] for one in body["usage"]["by_group"]} == {"vision", "nlp", "No group"}
    assert [job["job_id"] for job in body["idle_allocated"]["jobs"]] == [usage["idle"].pk]
    assert body["idle_allocated"]["running"] == 1
    assert "bob" not in str(body) and "carol" not in str(body)


@pytest.mark.django_db
def test_the_window_defaults_to_24_hours(api_as, owner):
    body = api_as(owner).get(UTILIZATION).json()
    assert body["window"] == "24h" and body["series"] == []


@pytest.mark.django_db
@pytest.mark.parametrize("window", ["1y", "24", "", "7D"])
def test_an_unknown_window_is_a_400_naming_the_field(api_as, owner, window):
    response = api_as(owner).get(UTILIZATION, {"window": window})
    assert response.status_code == 400
    assert response.json() == {"window": ["Choose one of: 24h, 7d, 30d."]}


@pytest.mark.django_db
def test_the_schema_documents_both_endpoints_with_their_outputs(api_as, owner):
    schema = api_as(owner).get("/api/schema/?format=json").json()
    utilization = schema["paths"]["/api/v1/utilization/"]["get"]
    window = next(p for p in utilization["parameters"] if p["name"] == "window")
    assert sorted(window["schema"]["enum"]) == ["24h", "30d", "7d"]
    components = schema["components"]["schemas"]
    assert {"ClusterOutput", "DeviceOutput", "UtilizationOutput", "IdleJobOutput"} <= set(
        components
    )
    assert "job_owner" in components["DeviceOutput"]["properties"]
