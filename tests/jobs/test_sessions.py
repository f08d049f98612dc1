"""Interactive sessions (jobs.sessions): submission rules, never preempted, a port per
node and start, the environment and Docker's publish, idle judging on their own window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import runtimes
from agents.services import _launch_spec
from config.errors import ValidationFailed
from jobs.choices import JobState
from jobs.idle_services import jobs_idle_sweep
from jobs.models import Allocation, Job
from jobs.services import JobSpec, job_cancel, job_start, job_submit
from scheduler.core.types import SchedulerSettings
from scheduler.snapshot import snapshot_build
from tests.dashboard.helpers import device, hold
from tests.jobs.test_idle_reaping import used
from tests.scheduler.livefixtures import configure

pytestmark = pytest.mark.django_db
JUPYTER = ["jupyter", "lab", "--ip=0.0.0.0", "--no-browser"]


def session(owner, **fields) -> Job:  # type: ignore[no-untyped-def]
    spec = JobSpec(image="jupyter/base-notebook", command=JUPYTER, interactive=True, **fields)
    return job_submit(owner=owner, spec=spec)


# ----------------------------------------------------------------------------- submission


def test_a_session_gets_the_default_walltime_one_node_and_a_token(owner, small_cluster):
    job = session(owner, num_gpus=2, consolidation="any")
    assert job.interactive and job.walltime_seconds == 4 * 3600
    assert job.consolidation == "required"
    assert len(job.session_token) >= 40
    assert session(owner).session_token != job.session_token
    batch = job_submit(owner=owner, spec=JobSpec(image="x/y", command=["true"]))
    assert not batch.interactive and batch.session_token == "" and batch.walltime_seconds is None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"walltime_seconds": 12 * 3600 + 1}, "walltime_seconds"),
        ({"max_retries": 1}, "max_retries"),
        ({"array_size": 3}, "array_size"),
        ({"num_gpus": 5}, "num_gpus"),  # more than one node of small_cluster holds
    ],
)
def test_what_a_session_may_not_be_is_refused_naming_the_field(owner, small_cluster, fields, field):
    with pytest.raises(ValidationFailed) as failure:
        session(owner, **fields)
    assert field in failure.value.errors
    assert not Job.objects.exists()


def test_the_maximum_walltime_is_allowed_and_a_batch_job_may_run_longer(owner, small_cluster):
    assert session(owner, walltime_seconds=12 * 3600).walltime_seconds == 12 * 3600
    spec = JobSpec(image="x/y", command=["true"], walltime_seconds=48 * 3600)
    assert job_submit(owner=owner, spec=spec).walltime_seconds == 48 * 3600


def test_interactive_must_be_a_boolean(owner, small_cluster):
    with pytest.raises(ValidationFailed) as failure:
        job_submit(owner=owner, spec=JobSpec(image="x/y", command=["true"], interactive="yes"))
    assert list(failure.value.errors) == ["interactive"]


# ----------------------------------------------------------------------------- scheduling


def test_the_scheduler_sees_a_session_as_not_preemptible(owner, small_cluster):
    notebook = session(owner)
    batch = job_submit(owner=owner, spec=JobSpec(image="x/y", command=["true"]))
    snapshot, _ = snapshot_build(now=timezone.now(), settings=SchedulerSettings())
    preemptible = {job.id: job.preemptible for job in snapshot.jobs}
    assert preemptible == {notebook.pk: False, batch.pk: True}


def test_each_running_session_of_a_node_gets_its_own_port(owner, small_cluster, settings):
    settings.GPULAB_SESSION_PORTS = (31000, 31001)
    first, second, third, elsewhere = (session(owner) for _ in range(4))
    a0 = [device(small_cluster, "a0", i) for i in range(3)]
    assert job_start(job_id=first.pk, device_ids=[a0[0].pk]).session_port == 31000
    assert job_start(job_id=second.pk, device_ids=[a0[1].pk]).session_port == 31001
    other_node = device(small_cluster, "a1", 0)
    assert job_start(job_id=elsewhere.pk, device_ids=[other_node.pk]).session_port == 31000
    # Every port of a0 is taken: the start is refused (the round drops it), nothing held.
    with pytest.raises(Exception, match="Every session port"):
        job_start(job_id=third.pk, device_ids=[a0[2].pk])
    third.refresh_from_db()
    assert third.state == JobState.PENDING and not third.allocations.exists()
    # A session that ends frees its port once the node poll has stopped its process: until
    # then the server may still be listening there.
    job_cancel(job_id=first.pk, by=owner)
    with pytest.raises(Exception, match="Every session port"):
        job_start(job_id=third.pk, device_ids=[a0[2].pk])
    Allocation.objects.filter(job=first).update(released_at=timezone.now())
    assert job_start(job_id=third.pk, device_ids=[a0[2].pk]).session_port == 31000


def test_with_a_gateway_ports_differ_across_nodes(owner, small_cluster, settings):
    """Every tunnel ends on the user's localhost: two sessions on two nodes must differ."""
    settings.GPULAB_SESSION_GATEWAY = "login.lab.example"
    first, second = session(owner), session(owner)
    a0, a1 = device(small_cluster, "a0", 0), device(small_cluster, "a1", 0)
    assert job_start(job_id=first.pk, device_ids=[a0.pk]).session_port == 30000
    assert job_start(job_id=second.pk, device_ids=[a1.pk]).session_port == 30001


def test_the_launch_carries_the_port_and_token_and_docker_publishes_it(owner, small_cluster):
    notebook = session(owner)
    gpu = device(small_cluster, "a0", 0)
    notebook = job_start(job_id=notebook.pk, device_ids=[gpu.pk])
    spec = _launch_spec(job=notebook, node=gpu.node)
    environment = runtimes.job_environment(spec)
    port, token = str(notebook.session_port), notebook.session_token
    assert environment["GPULAB_SESSION_PORT"] == environment["JUPYTER_PORT"] == port
    assert environment["GPULAB_SESSION_TOKEN"] == environment["JUPYTER_TOKEN"] == token
    assert environment["JUPYTER_PORT_RETRIES"] == "0"  # never another port than shown
    argv = runtimes.docker_run_argv(spec)
    assert argv[argv.index("--publish") + 1] == f"{port}:{port}"
    batch = job_start(
        job_id=job_submit(owner=owner, spec=JobSpec(image="x/y", command=["true"])).pk,
        device_ids=[device(small_cluster, "a0", 1).pk],
    )
    batch_spec = _launch_spec(job=batch, node=gpu.node)
    assert "--publish" not in runtimes.docker_run_argv(batch_spec)
    assert "JUPYTER_TOKEN" not in runtimes.job_environment(batch_spec)


@pytest.mark.parametrize(
    ("session_value", "problem"),
    [((0, "tok"), "port 0"), ((30000, "a b"), "token"), ((True, "tok"), "port True")],
)
def test_a_bad_port_or_token_refuses_the_launch(session_value, problem):
    spec = runtimes.LaunchSpec(
        job_id=1, attempt=1, image="x/y", command=["true"], env={}, device_uuids=["GPU-1"],
        run_root=".gpulab/runs", session=session_value,
    )  # fmt: skip
    with pytest.raises(runtimes.LaunchRefused, match=problem):
        runtimes.docker_run_argv(spec)


# ----------------------------------------------------------------------------- idle


def running_for(owner, gpu, minutes: int, *, interactive: bool) -> Job:  # type: ignore[no-untyped-def]
    now = timezone.now()
    job = hold(owner, [gpu], start=now - timedelta(minutes=minutes))
    Job.objects.filter(pk=job.pk).update(interactive=interactive)
    used(job, gpu, 0.0, since=now - timedelta(minutes=minutes), minutes=minutes)
    return job


def test_sessions_are_judged_on_their_own_window_even_with_reaping_off(owner, small_cluster):
    configure(idle_reap=False, session_idle_minutes=120, idle_window_minutes=60)
    gpus = [device(small_cluster, "a0", i) for i in range(3)]
    long_idle = running_for(owner, gpus[0], 130, interactive=True)
    short_idle = running_for(owner, gpus[1], 90, interactive=True)  # under its 120 min
    batch = running_for(owner, gpus[2], 130, interactive=False)  # reaping is off
    sweep = jobs_idle_sweep(now=timezone.now())
    assert sweep.warned == [long_idle.pk]
    long_idle.refresh_from_db()
    assert "over the last 120 min" in long_idle.events.last().message
    assert short_idle.pk not in sweep.warned and batch.pk not in sweep.warned


def test_batch_jobs_keep_their_window_beside_sessions(owner, small_cluster):
    configure(idle_reap=True, session_idle_minutes=120, idle_window_minutes=60)
    gpus = [device(small_cluster, "a0", i) for i in range(2)]
    notebook = running_for(owner, gpus[0], 90, interactive=True)
    batch = running_for(owner, gpus[1], 90, interactive=False)
    assert jobs_idle_sweep(now=timezone.now()).warned == [batch.pk]
    assert notebook.pk


def test_session_idle_zero_means_never_and_lifts_a_sessions_warning(owner, small_cluster):
    configure(idle_reap=True, session_idle_minutes=0, idle_window_minutes=60)
    gpus = [device(small_cluster, "a0", i) for i in range(2)]
    notebook = running_for(owner, gpus[0], 300, interactive=True)
    Job.objects.filter(pk=notebook.pk).update(idle_warned_at=timezone.now())
    batch = running_for(owner, gpus[1], 90, interactive=False)
    assert jobs_idle_sweep(now=timezone.now()).warned == [batch.pk]
    notebook.refresh_from_db()
    assert notebook.idle_warned_at is None


def test_a_session_idle_window_under_five_minutes_is_refused():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as failure:
        configure(session_idle_minutes=3)
    assert "session_idle_minutes" in failure.value.message_dict


def test_an_ipv6_node_is_bracketed_in_the_address_and_the_tunnel(owner, small_cluster, settings):
    from cluster.models import Node
    from jobs.selectors import sessions_access

    gpu = device(small_cluster, "a0", 0)
    Node.objects.filter(pk=gpu.node_id).update(address="2001:db8::5")
    notebook = job_start(job_id=session(owner).pk, device_ids=[gpu.pk])
    access = sessions_access(jobs=[notebook], viewer=owner)[notebook.pk]
    assert access.url == "http://[2001:db8::5]:30000/"
    settings.GPULAB_SESSION_GATEWAY = "login.lab.example"
    access = sessions_access(jobs=[notebook], viewer=owner)[notebook.pk]
    assert access.tunnel == "ssh -N -L 30000:'[2001:db8::5]':30000 login.lab.example"
    assert access.url == "http://localhost:30000/"


def test_the_django_admin_never_shows_the_token_nor_lets_a_job_become_a_session(
    owner, lab_admin, small_cluster
):
    from tests.dashboard.helpers import logged_in

    notebook = session(owner)
    page = logged_in(lab_admin).get(f"/admin/jobs/job/{notebook.pk}/change/").content.decode()
    assert notebook.session_token not in page
    assert 'name="session_token"' not in page and 'name="interactive"' not in page


def test_a_warned_sessions_page_shows_the_warning_and_keep_while_batch_reaping_is_off(
    owner, lab_admin, small_cluster
):
    from tests.dashboard.helpers import logged_in

    configure(idle_reap=False, session_idle_minutes=120)
    notebook = running_for(owner, device(small_cluster, "a0", 0), 130, interactive=True)
    assert jobs_idle_sweep(now=timezone.now()).warned == [notebook.pk]
    owners_page = logged_in(owner).get(f"/jobs/{notebook.pk}/").content.decode()
    assert "Idle: this job will be cancelled at" in owners_page
    admins_page = logged_in(lab_admin).get(f"/jobs/{notebook.pk}/").content.decode()
    assert f"/jobs/{notebook.pk}/keep/" in admins_page


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None])
def test_the_api_takes_a_json_boolean_for_interactive_only(owner, small_cluster, api_as, value):
    body = {"image": "x/y", "command": ["true"], "interactive": value}
    response = api_as(owner).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["interactive"]
    assert not Job.objects.exists()


def test_a_session_never_judged_gets_no_keep_form(owner, lab_admin, small_cluster):
    from tests.dashboard.helpers import logged_in

    configure(idle_reap=True, session_idle_minutes=0)
    notebook = running_for(owner, device(small_cluster, "a0", 0), 30, interactive=True)
    page = logged_in(lab_admin).get(f"/jobs/{notebook.pk}/").content.decode()
    assert f"/jobs/{notebook.pk}/keep/" not in page
    batch = running_for(owner, device(small_cluster, "a0", 1), 30, interactive=False)
    assert (
        f"/jobs/{batch.pk}/keep/" in logged_in(lab_admin).get(f"/jobs/{batch.pk}/").content.decode()
    )
