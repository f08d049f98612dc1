"""The cluster page: nodes and devices, who holds what (redacted for students), readings,
health, counts; drain and undrain for admins only."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.models import GpuSample
from cluster.choices import NodeState
from cluster.models import Node
from cluster.services import node_drain_settle
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import job_finish
from tests.dashboard.helpers import device, logged_in
from tests.factories import DeviceFactory, DeviceTypeFactory, JobFactory, NodeFactory

CLUSTER = "/cluster/"


def hold(owner, devices, *, state=JobState.RUNNING, minutes_ago=30, name="") -> Job:
    """A job of `owner` holding `devices` since `minutes_ago` (rows written directly)."""
    started = timezone.now() - timedelta(minutes=minutes_ago)
    job = JobFactory(
        owner=owner,
        state=state,
        num_gpus=len(devices),
        attempt=1,
        started_at=started,
        **({"name": name} if name else {}),
    )
    for gpu in devices:
        Allocation.objects.create(job=job, attempt=1, device=gpu, started_at=started)
    return job


def reading(device, *, pct=50, used_mb=4096, total_mb=81920, temp=60, ago_s=20, xid=(), ecc=0):
    return GpuSample.objects.create(
        device=device,
        at=timezone.now() - timedelta(seconds=ago_s),
        utilization_pct=pct,
        memory_used_mb=used_mb,
        memory_total_mb=total_mb,
        temperature_c=temp,
        ecc_uncorrected=ecc,
        xid_errors=list(xid),
    )


# --------------------------------------------------------------------------- the grid


@pytest.mark.django_db
def test_the_page_shows_every_node_its_devices_and_the_gpu_counts(lab_admin, small_cluster):
    hold(lab_admin, [device(small_cluster, "a0", 0), device(small_cluster, "a0", 1)])
    Node.objects.filter(name="a1").update(state=NodeState.DRAINED, state_reason="Drained: fans")
    Node.objects.filter(name="v0").update(state=NodeState.SUSPECT)

    response = logged_in(lab_admin).get(CLUSTER)

    assert response.status_code == 200
    counts = response.context["counts"]
    # 10 GPUs: 2 held; 2 idle on a0 (up); 4 on a1 (drained); 2 on v0 (suspect).
    assert (counts.total, counts.allocated, counts.free) == (10, 2, 2)
    assert (counts.out_of_service, counts.held_back) == (4, 2)
    page = response.content.decode()
    for name in ("a0", "a1", "v0"):
        assert f'id="node-{Node.objects.get(name=name).pk}-name">{name}</h2>' in page
    assert "Drained: fans" in page and "Suspect" in page
    assert page.count('class="device ') == 10


@pytest.mark.django_db
def test_a_gpu_whose_ended_jobs_process_is_not_yet_stopped_shows_as_stopping_not_free(
    owner, small_cluster
):
    gpu = device(small_cluster, "a0", 0)
    job = hold(owner, [gpu])
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    Allocation.objects.filter(job=job).update(ended_at=timezone.now())  # not released yet

    response = logged_in(owner).get(CLUSTER)

    counts = response.context["counts"]
    assert (counts.allocated, counts.stopping, counts.free) == (0, 1, 9)
    cell = response.context["nodes"][0].devices[0]
    assert (cell.allocated, cell.stopping) == (False, True)
    assert "stopping an ended job" in response.content.decode()

    # Once the node poll has seen the process gone, the GPU is free again.
    Allocation.objects.filter(job=job).update(released_at=timezone.now())
    counts = logged_in(owner).get(CLUSTER).context["counts"]
    assert (counts.stopping, counts.free) == (0, 10)


@pytest.mark.django_db
def test_a_device_shows_its_newest_recent_reading_or_no_reading(owner, small_cluster):
    busy = device(small_cluster, "a0", 0)
    reading(busy, pct=20, ago_s=90)
    reading(busy, pct=73, used_mb=12288, total_mb=81920, temp=64, ago_s=10)
    reading(device(small_cluster, "a0", 1), pct=99, ago_s=600)  # too old: no reading

    response = logged_in(owner).get(CLUSTER)

    cells = {
        (node.name, cell.index): cell for node in response.context["nodes"] for cell in node.devices
    }
    assert cells[("a0", 0)].utilization_pct == 73
    assert cells[("a0", 1)].has_reading is False
    page = response.content.decode()
    assert '73 %<span class="visually-hidden"> used</span>' in page
    assert "12.0 / 80 GiB" in page and "64 °C" in page
    assert "no reading" in page and "99 %" not in page


@pytest.mark.django_db
def test_a_device_with_recent_xid_or_ecc_errors_is_marked_check(owner, small_cluster):
    reading(device(small_cluster, "a0", 2), xid=[79], ago_s=600)
    reading(device(small_cluster, "a0", 3), ecc=3)
    reading(device(small_cluster, "v0", 0), xid=[13], ago_s=3 * 3600)  # long ago: healthy

    response = logged_in(owner).get(CLUSTER)

    health = {
        (node.name, cell.index): cell.health
        for node in response.context["nodes"]
        for cell in node.devices
    }
    assert health[("a0", 2)] == ["Xid 79"]
    assert health[("a0", 3)] == ["3 uncorrected ECC errors"]
    assert health[("v0", 0)] == [] and health[("a0", 0)] == []
    assert response.content.decode().count('class="badge-check" title=') == 2


@pytest.mark.django_db
def test_an_admin_sees_which_job_and_whose_holds_each_device(lab_admin, teammate, small_cluster):
    job = hold(teammate, [device(small_cluster, "v0", 1)])

    page = logged_in(lab_admin).get(CLUSTER).content.decode()

    assert f'<a href="/jobs/{job.pk}/">#{job.pk}</a>' in page
    assert "bob" in page


@pytest.mark.django_db
def test_a_student_sees_their_own_job_but_never_whose_job_holds_another_device(
    owner, teammate, outsider, small_cluster
):
    mine = hold(owner, [device(small_cluster, "a0", 0)])
    theirs = hold(teammate, [device(small_cluster, "a1", 0)])
    outsiders = hold(outsider, [device(small_cluster, "v0", 0)])

    response = logged_in(owner).get(CLUSTER)

    page = response.content.decode()
    assert f'<a href="/jobs/{mine.pk}/">#{mine.pk}</a>' in page
    for other in (theirs, outsiders):
        assert f"/jobs/{other.pk}/" not in page
        assert f"#{other.pk}<" not in page
    assert "bob" not in page and "carol" not in page
    assert page.count('<span class="redacted">in use</span>') == 2
    cells = [cell for node in response.context["nodes"] for cell in node.devices if cell.allocated]
    assert sorted((c.job_id, c.job_owner, c.mine) for c in cells if c.job_id) == [
        (mine.pk, "alice", True)
    ]


@pytest.mark.django_db
def test_the_grid_refreshes_itself_every_15_seconds(owner, small_cluster):
    page = logged_in(owner).get(CLUSTER).content.decode()
    assert 'data-refresh-seconds="15"' in page
    assert 'data-refresh-id="cluster-grid"' in page and 'data-refresh-id="cluster-counts"' in page
    grid = page[page.index('data-refresh-id="cluster-grid"') :]
    assert 'class="device-grid"' in grid


@pytest.mark.django_db
def test_a_node_without_heartbeats_says_never_and_a_recent_one_its_age(owner, small_cluster):
    Node.objects.filter(name="a0").update(last_heartbeat_at=timezone.now() - timedelta(seconds=12))
    page = logged_in(owner).get(CLUSTER).content.decode()
    (age,) = re.findall(r">(\d+) s ago</time>", page)
    assert 12 <= int(age) <= 30
    assert "Heartbeat never" in page


@pytest.mark.django_db
def test_anonymous_visitors_are_sent_to_login():
    response = Client().get(CLUSTER)
    assert response.status_code == 302 and response.url.startswith("/login/")


@pytest.mark.django_db
def test_only_admins_see_the_drain_and_undrain_forms(owner, lab_admin, small_cluster):
    Node.objects.filter(name="a1").update(state=NodeState.DRAINED)
    a0 = Node.objects.get(name="a0")
    a1 = Node.objects.get(name="a1")

    admin_page = logged_in(lab_admin).get(CLUSTER).content.decode()
    student_page = logged_in(owner).get(CLUSTER).content.decode()

    assert reverse("dashboard:node-drain", args=[a0.pk]) in admin_page
    assert reverse("dashboard:node-undrain", args=[a1.pk]) in admin_page
    assert reverse("dashboard:node-drain", args=[a1.pk]) not in admin_page
    assert "/drain/" not in student_page and "/undrain/" not in student_page


# --------------------------------------------------------------------------- drain and undrain


@pytest.mark.django_db
def test_an_admin_drains_an_idle_node_at_once(lab_admin, small_cluster):
    node = Node.objects.get(name="a1")
    client = logged_in(lab_admin)

    response = client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": "fans"})

    assert response.status_code == 302 and response.url == CLUSTER
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.DRAINED, "Drained by root: fans")
    assert "Node a1 is drained" in client.get(CLUSTER).content.decode()


@pytest.mark.django_db
def test_a_busy_node_drains_until_its_job_ends_then_undrain_brings_it_back(
    lab_admin, owner, small_cluster
):
    node = Node.objects.get(name="a0")
    job = hold(owner, [device(small_cluster, "a0", 0)])
    client = logged_in(lab_admin)

    client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": "driver update"})
    node.refresh_from_db()
    assert node.state == NodeState.DRAINING
    assert "Node a0 is draining" in client.get(CLUSTER).content.decode()

    job_finish(job_id=job.pk, exit_code=0)
    node_drain_settle()
    node.refresh_from_db()
    assert node.state == NodeState.DRAINED

    response = client.post(reverse("dashboard:node-undrain", args=[node.pk]))
    assert response.status_code == 302 and response.url == CLUSTER
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.UP, "")
    assert "Node a0 is up" in client.get(CLUSTER).content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["node-drain", "node-undrain"])
def test_a_student_may_neither_drain_nor_undrain(owner, small_cluster, action):
    node = Node.objects.get(name="a0")
    if action == "node-undrain":
        Node.objects.filter(pk=node.pk).update(state=NodeState.DRAINED, state_reason="x")
    before = Node.objects.values("state", "state_reason").get(pk=node.pk)

    response = logged_in(owner).post(
        reverse(f"dashboard:{action}", args=[node.pk]), {"reason": "x"}
    )

    assert response.status_code == 403
    assert Node.objects.values("state", "state_reason").get(pk=node.pk) == before


@pytest.mark.django_db
@pytest.mark.parametrize("reason", ["", "   "])
def test_a_drain_without_a_reason_is_refused_naming_the_field(lab_admin, small_cluster, reason):
    node = Node.objects.get(name="a0")
    client = logged_in(lab_admin)

    response = client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": reason})

    assert response.status_code == 302
    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.UP, "")
    page = client.get(CLUSTER).content.decode()
    assert "Node a0 not drained. Reason: This field is required." in page


@pytest.mark.django_db
def test_a_too_long_reason_is_refused_too(lab_admin, small_cluster):
    node = Node.objects.get(name="a0")
    client = logged_in(lab_admin)
    client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": "x" * 201})
    node.refresh_from_db()
    assert node.state == NodeState.UP
    assert (
        "Reason: Ensure this value has at most 200 characters"
        in client.get(CLUSTER).content.decode()
    )


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["node-drain", "node-undrain"])
def test_an_unknown_node_is_404(lab_admin, action):
    response = logged_in(lab_admin).post(
        reverse(f"dashboard:{action}", args=[999]), {"reason": "x"}
    )
    assert response.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "state", "said"),
    [
        ("node-drain", NodeState.UP, "Node a0 was not drained; enter a reason and press Drain"),
        ("node-undrain", NodeState.DRAINED, "Node a0 was not undrained; press Undrain"),
    ],
)
def test_a_get_of_drain_or_undrain_changes_nothing_and_says_so_on_the_cluster_page(
    lab_admin, small_cluster, action, state, said
):
    # What the login form sends back when the session ended before the form was posted.
    node = Node.objects.get(name="a0")
    Node.objects.filter(pk=node.pk).update(state=state, state_reason="before")
    client = logged_in(lab_admin)

    for method in (client.get, client.head):
        response = method(reverse(f"dashboard:{action}", args=[node.pk]))
        assert response.status_code == 302 and response.url == CLUSTER

    assert Node.objects.values_list("state", "state_reason").get(pk=node.pk) == (state, "before")
    assert said in client.get(CLUSTER).content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["node-drain", "node-undrain"])
def test_a_get_of_drain_or_undrain_is_still_refused_to_a_student(owner, small_cluster, action):
    node = Node.objects.get(name="a0")
    response = logged_in(owner).get(reverse(f"dashboard:{action}", args=[node.pk]))
    assert response.status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["node-drain", "node-undrain"])
def test_drain_and_undrain_refuse_other_methods(lab_admin, small_cluster, action):
    node = Node.objects.get(name="a0")
    url = reverse(f"dashboard:{action}", args=[node.pk])
    assert logged_in(lab_admin).put(url).status_code == 405


@pytest.mark.django_db
@pytest.mark.parametrize(("typed", "kept"), [("   ", "   "), ("x" * 201, "x" * 201)])
def test_a_refused_drain_marks_that_nodes_reason_field_and_keeps_what_was_typed(
    lab_admin, small_cluster, typed, kept
):
    node = Node.objects.get(name="a0")
    other = Node.objects.get(name="a1")
    client = logged_in(lab_admin)

    client.post(reverse("dashboard:node-drain", args=[node.pk]), {"reason": typed})
    page = client.get(CLUSTER).content.decode()

    field = re.search(rf'<input id="drain-reason-{node.pk}"[^>]*>', page).group(0)
    assert 'aria-invalid="true"' in field
    assert f'aria-describedby="drain-reason-{node.pk}-error"' in field
    assert f'value="{kept}"' in field
    error = re.search(rf'id="drain-reason-{node.pk}-error">([^<]*)<', page).group(1)
    assert error.startswith("Not drained.") and "Reason:" not in error
    assert "aria-invalid" not in re.search(rf'<input id="drain-reason-{other.pk}"[^>]*>', page)[0]
    # The page's own refreshes show it again, until the admin posts once more
    # (tests/dashboard/test_refresh_regions.py).


@pytest.mark.django_db
def test_draining_a_drained_node_or_undraining_an_up_one_changes_nothing_and_says_so(
    lab_admin, small_cluster
):
    drained = Node.objects.get(name="v0")
    Node.objects.filter(pk=drained.pk).update(state=NodeState.DRAINED, state_reason="old")
    up = Node.objects.get(name="a0")
    client = logged_in(lab_admin)

    client.post(reverse("dashboard:node-drain", args=[drained.pk]), {"reason": "x"})
    client.post(reverse("dashboard:node-undrain", args=[up.pk]))

    assert Node.objects.get(pk=drained.pk).state_reason == "old"
    assert Node.objects.get(pk=up.pk).state == NodeState.UP
    page = client.get(CLUSTER).content.decode()
    assert "Node v0 is drained; nothing to drain." in page
    assert "Node a0 is up; nothing to undrain." in page


# --------------------------------------------------------------------------- cost


def _busy_nodes(names: range, owner) -> None:
    a100 = DeviceTypeFactory(name="a100", speed=2.0)
    for n in names:
        node = NodeFactory(name=f"n{n}", last_heartbeat_at=timezone.now())
        devices = [DeviceFactory(node=node, index=i, device_type=a100) for i in range(4)]
        hold(owner, devices[:2])
        for gpu in devices:
            reading(gpu, pct=40, xid=[48] if gpu.index == 3 else ())


@pytest.mark.django_db
def test_the_page_costs_a_fixed_number_of_queries(lab_admin, owner, django_assert_max_num_queries):
    _busy_nodes(range(3), owner)
    client = logged_in(lab_admin)
    with django_assert_max_num_queries(10):
        assert client.get(CLUSTER).status_code == 200

    with CaptureQueriesContext(connection) as three:
        client.get(CLUSTER)
    _busy_nodes(range(3, 6), owner)
    with CaptureQueriesContext(connection) as six:
        assert len(client.get(CLUSTER).context["nodes"]) == 6
    assert len(six.captured_queries) == len(three.captured_queries)
