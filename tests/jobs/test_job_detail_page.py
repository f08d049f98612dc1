"""The job detail page: GPU use chart, log tail fragment, preemption history, clone,
auto-refresh; and who may see what on each of them."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import JobGpuMinute, JobGpuSample
from agents.services import agent_launch, agent_logs_tail
from cluster.choices import NodeState
from cluster.models import Device, Node
from jobs import selectors
from jobs.choices import JobState
from jobs.models import Job
from jobs.services import job_cancel, job_mark_running, job_preempt, job_start
from scheduler.selectors import scheduler_config_get
from tests.agents.conftest import (  # the SSH fixtures, for the one real-node test
    ssh_node,  # noqa: F401
    ssh_server,  # noqa: F401
    ssh_settings,  # noqa: F401
    started_job,
    wait_for,
)
from tests.factories import DeviceFactory, JobFactory, NodeFactory


def logged_in(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def running(job: Job, *devices: Device) -> Job:
    job_start(job_id=job.pk, device_ids=[device.pk for device in devices])
    return job_mark_running(job_id=job.pk)


def figure_of(response) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(response.context["gpu_figure"])


# --------------------------------------------------------------------------- GPU use chart


@pytest.mark.django_db
def test_the_chart_holds_the_jobs_minutes_and_its_newer_raw_samples_per_device(
    owner, small_cluster
):
    first, second = small_cluster[0], small_cluster[1]
    job = running(JobFactory(owner=owner, num_gpus=2), first, second)
    other = running(JobFactory(owner=owner), small_cluster[2])
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    for device, utilization, memory in ((first, 40.0, 2048), (second, 60.0, 4096)):
        JobGpuMinute.objects.create(
            job=job, device=device, minute=minute, samples=4,
            utilization_avg=utilization, memory_used_max_mb=memory,
        )  # fmt: skip
    # A raw sample of the rolled-up minute is already in its row; a later one is new.
    JobGpuSample.objects.create(job=job, attempt=1, device=first, at=minute + timedelta(seconds=5),
                                utilization_pct=99, memory_used_mb=9999)  # fmt: skip
    JobGpuSample.objects.create(job=job, attempt=1, device=first, at=minute + timedelta(minutes=2),
                                utilization_pct=80, memory_used_mb=3072)  # fmt: skip
    JobGpuSample.objects.create(job=other, attempt=1, device=small_cluster[2],
                                at=minute, utilization_pct=7, memory_used_mb=7)  # fmt: skip

    response = logged_in(owner).get(f"/jobs/{job.pk}/")

    traces = figure_of(response)["data"]
    by_panel = {(t["name"], t.get("yaxis", "y")): t["y"] for t in traces}
    assert by_panel == {
        ("a0/0 (a100)", "y"): [40.0, 80],
        ("a0/0 (a100)", "y2"): [2.0, 3.0],  # GiB
        ("a0/1 (a100)", "y"): [60.0],
        ("a0/1 (a100)", "y2"): [4.0],
    }
    assert 'data-refresh-id="job-gpu-use"' in response.content.decode()


@pytest.mark.django_db
def test_the_chart_covers_the_last_24_hours_of_the_jobs_activity_not_of_the_clock(small_cluster):
    device = small_cluster[0]
    job = JobFactory()
    last = timezone.now().replace(second=0, microsecond=0) - timedelta(days=3)
    for minute, utilization in ((last, 50.0), (last - timedelta(hours=23), 40.0),
                                (last - timedelta(hours=25), 30.0)):  # fmt: skip
        JobGpuMinute.objects.create(job=job, device=device, minute=minute, samples=1,
                                    utilization_avg=utilization, memory_used_max_mb=0)  # fmt: skip

    [use] = selectors.job_gpu_use(job=job)

    assert [point.utilization_pct for point in use.points] == [40.0, 50.0]


@pytest.mark.django_db
def test_a_long_window_is_bucketed_to_a_bounded_number_of_points(small_cluster):
    device = small_cluster[0]
    job = JobFactory()
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=10)
    JobGpuMinute.objects.bulk_create(
        JobGpuMinute(job=job, device=device, minute=start + timedelta(minutes=n), samples=1,
                     utilization_avg=float(n % 100), memory_used_max_mb=n)
        for n in range(600)
    )  # fmt: skip

    [use] = selectors.job_gpu_use(job=job, max_points=100)

    assert 90 <= len(use.points) <= 101
    assert use.step == timedelta(minutes=6)
    assert max(point.memory_used_mb for point in use.points) == 599  # peaks survive


@pytest.mark.django_db
def test_time_off_the_gpus_breaks_the_line_instead_of_drawing_a_slope(owner, small_cluster):
    device = small_cluster[0]
    job = JobFactory(owner=owner)
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=2)
    for offset, utilization in ((0, 10.0), (1, 20.0), (60, 90.0)):  # preempted for an hour
        JobGpuMinute.objects.create(
            job=job, device=device, minute=start + timedelta(minutes=offset),
            samples=1, utilization_avg=utilization, memory_used_max_mb=0,
        )  # fmt: skip

    utilization = figure_of(logged_in(owner).get(f"/jobs/{job.pk}/"))["data"][0]

    assert utilization["y"] == [10.0, 20.0, None, 90.0]


@pytest.mark.django_db
def test_a_job_without_samples_gets_an_empty_chart_that_says_so(owner):
    job = JobFactory(owner=owner)
    response = logged_in(owner).get(f"/jobs/{job.pk}/")
    figure = figure_of(response)
    assert figure["data"] == []
    assert figure["layout"]["annotations"][-1]["text"] == "No GPU use recorded yet."


@pytest.mark.django_db
def test_a_job_cancelled_before_it_ran_has_no_chart_and_loads_no_plotly(owner):
    job = JobFactory(owner=owner)
    job_cancel(job_id=job.pk, by=owner)
    page = logged_in(owner).get(f"/jobs/{job.pk}/").content.decode()
    assert "job-gpu-use" not in page and "plotly" not in page


# --------------------------------------------------------------------------- log fragment


@pytest.fixture
def ssh_client_key(settings, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """A client key for gpulab to present, and one quick connect try of 2 s at most."""
    key = tmp_path / "client_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    settings.GPULAB_SSH_KEY_FILE = str(key)
    settings.GPULAB_SSH_CONNECT_ATTEMPTS = 1
    settings.GPULAB_SSH_TIMEOUT_SECONDS = 2
    return key


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


@pytest.mark.django_db
def test_the_page_itself_never_reads_the_log_the_fragment_does(owner, small_cluster):
    job = running(JobFactory(owner=owner), small_cluster[0])
    with mock.patch("agents.logs.agent_logs_tail") as tail:
        page = logged_in(owner).get(f"/jobs/{job.pk}/").content.decode()
    tail.assert_not_called()
    assert f'data-logs-url="/jobs/{job.pk}/logs/"' in page
    assert "js/job_detail.js" in page


@pytest.mark.django_db
def test_the_fragment_shows_the_last_200_lines_of_the_chosen_stream(owner, small_cluster):
    job = running(JobFactory(owner=owner), small_cluster[0])
    text = "".join(f"line {n} <b>\n" for n in range(1, 251))
    with mock.patch("agents.logs.agent_logs_tail", return_value=text) as tail:
        response = logged_in(owner).get(f"/jobs/{job.pk}/logs/", {"stream": "stderr"})
    body = response.content.decode()
    assert response.status_code == 200
    tail.assert_called_once_with(
        job_id=job.pk, stream="stderr", max_bytes=64 * 1024, budget=mock.ANY
    )
    assert "line 51 &lt;b&gt;" in body and "line 250" in body and "line 50 " not in body
    assert 'data-stream="stderr" aria-current="true"' in body
    assert "data-log-final" not in body


@pytest.mark.django_db
def test_a_job_that_never_started_has_no_logs_yet(owner):
    job = JobFactory(owner=owner)
    body = logged_in(owner).get(f"/jobs/{job.pk}/logs/").content.decode()
    assert "No logs yet: the job has not started." in body


@pytest.mark.django_db
def test_a_job_on_a_simulated_node_says_the_demo_node_writes_no_logs(owner):
    node = NodeFactory(name="sim0", simulated=True)
    job = running(JobFactory(owner=owner), DeviceFactory(node=node))
    response = logged_in(owner).get(f"/jobs/{job.pk}/logs/")
    assert response.status_code == 200
    assert "sim0 is a simulated (demo) node: no log output." in response.content.decode()


@pytest.mark.django_db
def test_an_unreachable_node_gives_a_friendly_message_fast_and_is_not_retried_at_once(
    owner, lab_admin, ssh_client_key
):
    node = NodeFactory(name="gone0", address="127.0.0.1", ssh_port=closed_port())
    job = running(JobFactory(owner=owner), DeviceFactory(node=node))
    client = logged_in(owner)

    began = time.monotonic()
    response = client.get(f"/jobs/{job.pk}/logs/")
    elapsed = time.monotonic() - began

    body = response.content.decode()
    assert response.status_code == 200 and elapsed < 5
    assert "The log cannot be read from node gone0 right now." in body
    assert "Cause:" not in body  # the SSH error (address, port) is for admins
    with mock.patch("agents.logs.agent_logs_tail") as tail:
        again = client.get(f"/jobs/{job.pk}/logs/", {"stream": "stderr"})
        admin_view = logged_in(lab_admin).get(f"/jobs/{job.pk}/logs/").content.decode()
    tail.assert_not_called()  # the failure is remembered for a while: no SSH pile-up
    assert "cannot be read from node gone0" in again.content.decode()
    assert "Cause: Node gone0 is unreachable over SSH" in admin_view


@pytest.mark.django_db
def test_the_logs_api_tells_a_student_the_node_is_unreachable_and_only_admins_why(
    owner, lab_admin, api_as, ssh_client_key
):
    node = NodeFactory(name="gone1", address="127.0.0.1", ssh_port=closed_port())
    job = running(JobFactory(owner=owner), DeviceFactory(node=node))
    url = f"/api/v1/agents/jobs/{job.pk}/logs/"

    student = api_as(owner).get(url)
    with mock.patch("agents.logs.agent_logs_tail") as tail:
        admin = api_as(lab_admin).get(url)
    tail.assert_not_called()  # remembered: the API does not pile SSH tries up either

    assert student.status_code == admin.status_code == 503
    assert student.json() == {
        "detail": "The log cannot be read from node gone1 right now.",
        "code": "logs_unavailable",
    }  # no address, port or key path for a student
    assert admin.json()["cause"].startswith("Node gone1 is unreachable over SSH")


@pytest.mark.django_db
def test_the_logs_api_does_not_try_a_down_node_and_404s_before_the_first_start(
    owner, small_cluster, api_as
):
    job = running(JobFactory(owner=owner), small_cluster[0])
    Node.objects.filter(name="a0").update(state=NodeState.DOWN)
    with mock.patch("agents.logs.agent_logs_tail") as tail:
        down = api_as(owner).get(f"/api/v1/agents/jobs/{job.pk}/logs/")
    tail.assert_not_called()
    assert down.status_code == 503
    assert down.json()["detail"] == "Node a0 is down, so its logs cannot be read now."
    pending = JobFactory(owner=owner)
    assert api_as(owner).get(f"/api/v1/agents/jobs/{pending.pk}/logs/").status_code == 404


@pytest.mark.django_db
def test_no_ssh_key_configured_is_a_message_not_a_500(owner, small_cluster, settings):
    settings.GPULAB_SSH_KEY_FILE = ""
    job = running(JobFactory(owner=owner), small_cluster[0])
    response = logged_in(owner).get(f"/jobs/{job.pk}/logs/")
    assert response.status_code == 200
    assert "The log cannot be read from node a0 right now." in response.content.decode()


@pytest.mark.django_db
def test_a_node_that_is_down_is_not_even_tried(owner, small_cluster):
    job = running(JobFactory(owner=owner), small_cluster[0])
    Node.objects.filter(name="a0").update(state=NodeState.DOWN)
    with mock.patch("agents.logs.agent_logs_tail") as tail:
        body = logged_in(owner).get(f"/jobs/{job.pk}/logs/").content.decode()
    tail.assert_not_called()
    assert "Node a0 is down, so its logs cannot be read now." in body


@pytest.mark.django_db
def test_a_finished_jobs_fragment_tells_the_page_to_stop_polling(owner, small_cluster):
    job = running(JobFactory(owner=owner), small_cluster[0])
    job_cancel(job_id=job.pk, by=owner)
    with mock.patch("agents.logs.agent_logs_tail", return_value="bye\n"):
        body = logged_in(owner).get(f"/jobs/{job.pk}/logs/").content.decode()
    assert "data-log-final" in body and "bye" in body


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["teammate", "outsider"])
def test_another_student_gets_404_for_the_log_fragment(persona, owner, small_cluster, request):
    job = running(JobFactory(owner=owner), small_cluster[0])
    with mock.patch("agents.logs.agent_logs_tail") as tail:
        response = logged_in(request.getfixturevalue(persona)).get(f"/jobs/{job.pk}/logs/")
    assert response.status_code == 404
    tail.assert_not_called()


@pytest.mark.django_db
def test_an_admin_reads_any_jobs_log(owner, lab_admin, small_cluster):
    job = running(JobFactory(owner=owner), small_cluster[0])
    with mock.patch("agents.logs.agent_logs_tail", return_value="hello\n"):
        body = logged_in(lab_admin).get(f"/jobs/{job.pk}/logs/").content.decode()
    assert "hello" in body


# --------------------------------------------------------------------------- preemption


@pytest.fixture
def preempted(owner, outsider, small_cluster) -> tuple[Job, Job]:  # type: ignore[no-untyped-def]
    """The owner's job preempted for the outsider's job."""
    victim = running(JobFactory(owner=owner, name="victim"), small_cluster[0])
    winner = JobFactory(owner=outsider, name="winner")
    job_preempt(job_id=victim.pk, reason="a queue-0 job needs the GPUs", by_job_id=winner.pk)
    return victim, winner


@pytest.mark.django_db
def test_the_admin_sees_which_job_preempted_it_and_why(preempted, lab_admin):
    victim, winner = preempted
    page = logged_in(lab_admin).get(f"/jobs/{victim.pk}/").content.decode()
    link = f'Preempted for <a href="/jobs/{winner.pk}/">job #{winner.pk}</a> (carol)'
    assert page.count(link) == 2  # the "Why" fact and the history
    assert "a queue-0 job needs the GPUs" in page


@pytest.mark.django_db
def test_a_student_sees_why_but_not_the_other_students_job(preempted, owner):
    victim, winner = preempted
    page = logged_in(owner).get(f"/jobs/{victim.pk}/").content.decode()
    assert page.count("Preempted for another job: a queue-0 job needs the GPUs") == 2
    # "job #N", not a bare "#N": the page's chart colours (#5b6575) hold one when N is 5.
    assert f"/jobs/{winner.pk}/" not in page and f"job #{winner.pk}" not in page
    listing = logged_in(owner).get("/jobs/").content.decode()
    assert "Preempted for another job" in listing and f"job #{winner.pk}" not in listing


@pytest.mark.django_db
def test_the_schedulers_own_wording_does_not_give_the_other_job_away(
    owner, outsider, small_cluster, api_as
):
    # The policies write "job 7 has higher priority ..." after the prefix; before, only the
    # prefix was hidden, so the id still showed on the page and in the API.
    victim = running(JobFactory(owner=owner), small_cluster[0])
    winner = JobFactory(owner=outsider)
    why = f"job {winner.pk} has higher priority and needs its devices"
    job_preempt(job_id=victim.pk, reason=why, by_job_id=winner.pk)

    page = logged_in(owner).get(f"/jobs/{victim.pk}/").content.decode()
    api = api_as(owner).get(f"/api/v1/jobs/{victim.pk}/").json()
    listing = api_as(owner).get("/api/v1/jobs/").json()["results"]

    hidden = "Preempted for another job: another job has higher priority and needs its devices"
    assert hidden in page and f"job {winner.pk}" not in page
    assert api["reason"] == hidden
    assert api["events"][-1]["message"] == hidden
    assert listing[0]["reason"] == hidden
    admin = api_as(outsider).get(f"/api/v1/jobs/{winner.pk}/")
    assert admin.status_code == 200  # the winner's owner sees their own job as before


@pytest.mark.django_db
def test_a_student_sees_the_link_when_their_own_job_preempted_it(owner, small_cluster):
    victim = running(JobFactory(owner=owner), small_cluster[0])
    winner = JobFactory(owner=owner)
    job_preempt(job_id=victim.pk, reason="higher priority", by_job_id=winner.pk)
    page = logged_in(owner).get(f"/jobs/{victim.pk}/").content.decode()
    assert f'<a href="/jobs/{winner.pk}/">job #{winner.pk}</a>' in page


# --------------------------------------------------------------------------- clone


@pytest.fixture
def source_job(owner) -> Job:  # type: ignore[no-untyped-def]
    return JobFactory(
        owner=owner,
        group=owner.lab_groups.get(),
        name="resnet sweep",
        image="pytorch/pytorch:2.4.0",
        command=["python", "train.py", "--name", "my run"],
        num_gpus=2,
        accepted_types=["a100", "v100"],
        consolidation="required",
        walltime_seconds=5400,
        max_retries=2,
        env={"SEED": "1", "MODE": "fast"},
        state=JobState.FAILED,
    )


@pytest.mark.django_db
def test_the_detail_page_links_to_clone_and_resubmit(owner, source_job):
    page = logged_in(owner).get(f"/jobs/{source_job.pk}/").content.decode()
    assert f'href="/jobs/submit/?clone={source_job.pk}"' in page and "Clone and resubmit" in page


@pytest.mark.django_db
def test_clone_prefills_the_form_and_resubmits_the_same_job(owner, source_job, small_cluster):
    client = logged_in(owner)
    response = client.get("/jobs/submit/", {"clone": source_job.pk})

    form = response.context["form"]
    # jsonb keeps keys in its own order, so the lines may come back in another order.
    assert sorted(form.initial.pop("env").splitlines()) == ["MODE=fast", "SEED=1"]
    assert form.initial == {
        "name": "resnet sweep",
        "image": "pytorch/pytorch:2.4.0",
        "command": "python train.py --name 'my run'",
        "num_gpus": 2,
        "accepted_types": "a100, v100",
        "consolidation": "required",
        "walltime_minutes": 90,
        "max_retries": 2,
        "group": "vision",
        "depends_on": "",
        "dependency": "afterok",
        "notify": "",
    }
    assert 'value="python train.py --name &#x27;my run&#x27;"' in response.content.decode()
    # Posting the pre-filled values back submits an identical job.
    values = {key: value for key, value in form.initial.items() if value is not None}
    values["env"] = "SEED=1\nMODE=fast"
    client.post(f"/jobs/submit/?clone={source_job.pk}", values)
    clone = Job.objects.exclude(pk=source_job.pk).get()
    fields = ["name", "image", "command", "num_gpus", "accepted_types", "consolidation",
              "walltime_seconds", "max_retries", "env", "group_id"]  # fmt: skip
    assert {f: getattr(clone, f) for f in fields} == {f: getattr(source_job, f) for f in fields}
    assert clone.state == JobState.PENDING and clone.owner == owner


@pytest.mark.django_db
def test_an_admin_may_clone_a_students_job_but_not_into_the_students_group(lab_admin, source_job):
    response = logged_in(lab_admin).get("/jobs/submit/", {"clone": source_job.pk})
    assert response.status_code == 200
    initial = response.context["form"].initial
    assert initial["command"] == "python train.py --name 'my run'"
    assert "group" not in initial  # the admin is not in "vision": the default applies


@pytest.mark.django_db
@pytest.mark.parametrize("persona", ["teammate", "outsider"])
def test_cloning_another_students_job_is_a_404_and_shows_nothing(persona, source_job, request):
    response = logged_in(request.getfixturevalue(persona)).get(
        "/jobs/submit/", {"clone": source_job.pk}
    )
    assert response.status_code == 404
    assert b"train.py" not in response.content and b"SEED" not in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["abc", "", "999999", "99999999999999999999"])
def test_a_clone_of_no_job_is_a_404(owner, value):
    assert logged_in(owner).get("/jobs/submit/", {"clone": value}).status_code == 404


@pytest.mark.django_db
def test_a_multi_line_env_value_is_flagged_not_silently_broken(owner):
    job = JobFactory(owner=owner, env={"KEY": "line1\nline2"})
    page = logged_in(owner).get("/jobs/submit/", {"clone": job.pk}).content.decode()
    assert "The value of KEY spans several lines" in page


# --------------------------------------------------------------------------- refresh, queries


@pytest.mark.django_db
@pytest.mark.parametrize("state", [JobState.PENDING, JobState.RUNNING, JobState.PREEMPTING])
def test_a_live_job_refreshes_every_10_seconds(owner, state):
    page = logged_in(owner).get(f"/jobs/{JobFactory(owner=owner, state=state).pk}/")
    html = page.content.decode()
    assert 'data-refresh-seconds="10"' in html
    for region in ("job-facts", "job-history", "job-actions", "job-gpu-use"):
        assert f'data-refresh-id="{region}"' in html


@pytest.mark.django_db
@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED])
def test_a_finished_job_does_not_refresh(owner, state):
    html = logged_in(owner).get(f"/jobs/{JobFactory(owner=owner, state=state).pk}/").content
    assert b"data-refresh-seconds" not in html and b"Cancel job" not in html


@pytest.mark.django_db
def test_the_detail_page_needs_a_bounded_number_of_queries(
    lab_admin, owner, outsider, small_cluster, django_assert_max_num_queries
):
    devices = small_cluster[:4]
    victim = running(JobFactory(owner=owner, num_gpus=4), *devices)
    now = timezone.now().replace(second=0, microsecond=0)
    JobGpuMinute.objects.bulk_create(
        JobGpuMinute(job=victim, device=device, minute=now - timedelta(minutes=n), samples=1,
                     utilization_avg=50, memory_used_max_mb=1)
        for n in range(30) for device in devices
    )  # fmt: skip
    for n in range(5):
        winner = JobFactory(owner=outsider)
        job_preempt(job_id=victim.pk, reason=f"round {n}", by_job_id=winner.pk)
        Job.objects.filter(pk=victim.pk).update(state=JobState.RUNNING)
    scheduler_config_get()  # the settings row exists in a running lab
    client = logged_in(lab_admin)
    # session, user, job, events, mentioned jobs, 2 chart bounds, minutes, samples, and for
    # the measured speed the job's argv as text and its program's progress rows, the jobs
    # it waits for, the idle-reaping settings (a running job's Keep form)
    with django_assert_max_num_queries(14):
        response = client.get(f"/jobs/{victim.pk}/")
    assert response.status_code == 200


@pytest.mark.django_db
def test_the_log_fragment_needs_a_bounded_number_of_queries(
    owner, small_cluster, django_assert_max_num_queries
):
    job = running(JobFactory(owner=owner), small_cluster[0])
    client = logged_in(owner)
    with (
        mock.patch("agents.logs.agent_logs_tail", return_value="x\n"),
        django_assert_max_num_queries(5),
    ):
        assert client.get(f"/jobs/{job.pk}/logs/").status_code == 200


# --------------------------------------------------------------------------- a real node


@pytest.mark.django_db
def test_the_fragment_reads_a_real_nodes_log_over_ssh(request, owner) -> None:  # type: ignore[no-untyped-def]
    """End to end through OpenSSH on 127.0.0.1 (tests/agents/conftest.py; skipped where
    /usr/sbin/sshd is missing, like the agents' SSH tests)."""
    node = request.getfixturevalue("ssh_node")
    job = started_job(node, command=["sh", "-c", "echo out; echo err >&2; sleep 30"], owner=owner)
    agent_launch(job_id=job.pk, attempt=job.attempt)
    wait_for(lambda: agent_logs_tail(job_id=job.pk) == "out\n")

    client = logged_in(owner)
    stdout = client.get(f"/jobs/{job.pk}/logs/").content.decode()
    stderr = client.get(f"/jobs/{job.pk}/logs/", {"stream": "stderr"}).content.decode()

    assert '<pre class="log"' in stdout and ">out</pre>" in stdout
    assert ">err</pre>" in stderr
