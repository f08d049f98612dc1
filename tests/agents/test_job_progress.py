"""Jobs' own progress, reported by node agents: recorded per attempt, turned into rates
per device type, and into the per-job speeds AlloX placement reads in a live round."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents.heartbeats import agent_heartbeat_record, node_agent_token_create
from agents.models import JobProgress
from agents.selectors import JobProgram, argv_text, measured_rates
from cluster.models import Device, DeviceType, Node
from jobs.choices import JobState
from jobs.models import Allocation, Job
from jobs.services import JobSpec, job_mark_running, job_start, job_submit
from scheduler.selectors import scheduler_settings_from
from scheduler.services import scheduling_round_run
from scheduler.snapshot import snapshot_build
from tests.agents.conftest import reported_gpus
from tests.factories import DeviceFactory, DeviceTypeFactory, JobFactory, NodeFactory, UserFactory
from tests.scheduler.livefixtures import configure

URL = "/api/v1/agents/heartbeat/"
pytestmark = pytest.mark.usefixtures("fresh_rate_limits")
T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)


@pytest.fixture
def two_nodes(db: None) -> tuple[Node, Node]:
    a100 = DeviceTypeFactory(name="a100", speed=1.0)
    k80 = DeviceTypeFactory(name="k80", speed=0.5)
    here, there = NodeFactory(name="gpu-1"), NodeFactory(name="gpu-2")
    DeviceFactory(node=here, index=0, uuid="GPU-here-0", device_type=a100)
    DeviceFactory(node=here, index=1, uuid="GPU-here-1", device_type=k80)
    DeviceFactory(node=there, index=0, uuid="GPU-there-0", device_type=a100)
    return here, there


def running_on(*devices: Device, command: tuple[str, ...] = ("python", "train.py")) -> Job:
    job = JobFactory(command=list(command), num_gpus=len(devices))
    job_start(job_id=job.pk, device_ids=[device.pk for device in devices])
    return job_mark_running(job_id=job.pk)


def read_through(node: Node, job_id: int, attempt: int) -> str:
    """The GPU the agent read an attempt's progress through: its lowest on `node`, else
    (an attempt that runs elsewhere) the node's first."""
    allocation = (
        Allocation.objects.filter(job_id=job_id, attempt=attempt, device__node=node)
        .order_by("device_id")
        .first()
    )
    return (allocation.device if allocation else node.devices.order_by("index")[0]).uuid


def heartbeat(
    node: Node, readings: list[tuple[int, int, float]], at: datetime, *, through: str | None = None
) -> dict[str, Any]:
    """A heartbeat of idle GPUs (readings are tested elsewhere) and jobs' progress, each
    read through the attempt's own GPU, or through `through`."""
    return agent_heartbeat_record(
        node=node,
        heartbeat={
            "driver_version": "550",
            "cuda_version": "12.4",
            "gpus": reported_gpus(node),
            "jobs": [
                {
                    "job_id": job_id,
                    "attempt": attempt,
                    "gpu_uuid": through or read_through(node, job_id, attempt),
                    "progress": progress,
                }
                for job_id, attempt, progress in readings
            ],
        },
        now=at,
    )


def test_readings_become_one_row_per_attempt_on_its_device_type(two_nodes) -> None:
    here, _ = two_nodes
    job = running_on(here.devices.get(index=1))

    heartbeat(here, [(job.pk, job.attempt, 100.0)], T0)
    result = heartbeat(here, [(job.pk, job.attempt, 1300.0)], T0 + timedelta(minutes=2))

    assert result["recorded_progress"] == 1
    row = JobProgress.objects.get()
    assert (row.job_id, row.attempt, row.device_type.name) == (job.pk, job.attempt, "k80")
    assert (row.first_progress, row.first_at) == (100.0, T0)
    assert (row.last_progress, row.last_at) == (1300.0, T0 + timedelta(minutes=2))


def test_an_agent_cannot_report_for_a_job_on_another_node_or_another_attempt(two_nodes) -> None:
    here, there = two_nodes
    elsewhere = running_on(there.devices.get())
    mine = running_on(here.devices.get(index=0))

    result = heartbeat(
        here, [(elsewhere.pk, elsewhere.attempt, 5.0), (mine.pk, mine.attempt + 1, 5.0)], T0
    )

    assert result["recorded_progress"] == 0
    assert not JobProgress.objects.exists()


def test_a_process_on_another_gpu_cannot_report_for_a_job_it_claims_to_be(two_nodes) -> None:
    """A job's process may set GPULAB_JOB_ID to another job's id in its own environment;
    the agent then reads "that job's" progress through the impostor's GPU."""
    here, _ = two_nodes
    victim = running_on(here.devices.get(index=1))
    impostor_gpu = here.devices.get(index=0)
    running_on(impostor_gpu)

    result = heartbeat(here, [(victim.pk, victim.attempt, 1e9)], T0, through=impostor_gpu.uuid)

    assert result["recorded_progress"] == 0
    assert not JobProgress.objects.exists()


def test_a_reading_that_names_no_gpu_is_ignored(two_nodes) -> None:
    here, _ = two_nodes
    job = running_on(here.devices.get(index=0))
    reading = {"job_id": job.pk, "attempt": job.attempt, "progress": 5.0}  # an agent before v2

    payload = {"driver_version": "", "cuda_version": "", "gpus": reported_gpus(here)}

    result = agent_heartbeat_record(node=here, heartbeat={**payload, "jobs": [reading]}, now=T0)

    assert result["recorded_progress"] == 0


def test_a_restarted_counter_measures_again_and_a_late_heartbeat_changes_nothing(
    two_nodes,
) -> None:
    here, _ = two_nodes
    job = running_on(here.devices.get(index=0))
    heartbeat(here, [(job.pk, job.attempt, 500.0)], T0)
    heartbeat(here, [(job.pk, job.attempt, 900.0)], T0 + timedelta(minutes=1))

    heartbeat(here, [(job.pk, job.attempt, 20.0)], T0 + timedelta(minutes=2))  # counter reset
    heartbeat(here, [(job.pk, job.attempt, 9999.0)], T0 + timedelta(minutes=1))  # delayed

    row = JobProgress.objects.get()
    assert (row.first_progress, row.first_at) == (20.0, T0 + timedelta(minutes=2))
    assert (row.last_progress, row.last_at) == (20.0, T0 + timedelta(minutes=2))


def test_an_attempt_spanning_two_device_types_has_no_type(two_nodes) -> None:
    here, _ = two_nodes
    job = running_on(*here.devices.order_by("index"))

    heartbeat(here, [(job.pk, job.attempt, 1.0)], T0)

    assert JobProgress.objects.get().device_type is None


@pytest.mark.parametrize(
    "reading",
    [
        {"job_id": 1, "attempt": 1, "progress": -5},
        {"job_id": 1, "attempt": 1, "progress": "lots"},
        {"job_id": 0, "attempt": 1, "progress": 5},
        {"job_id": 1, "progress": 5},
    ],
)
def test_a_malformed_progress_reading_is_refused_naming_the_field(
    two_nodes, reading: dict[str, Any]
) -> None:
    here, _ = two_nodes
    _, key = node_agent_token_create(node_id=here.pk)
    payload = {"driver_version": "550", "cuda_version": "12.4", "gpus": [], "jobs": [reading]}

    response = APIClient().post(URL, payload, format="json", HTTP_AUTHORIZATION=f"Bearer {key}")

    assert response.status_code == 400
    assert "jobs" in response.json()
    assert not JobProgress.objects.exists()


def test_a_heartbeat_from_an_older_agent_without_jobs_is_accepted(two_nodes) -> None:
    here, _ = two_nodes
    _, key = node_agent_token_create(node_id=here.pk)
    payload = {"driver_version": "550", "cuda_version": "12.4", "gpus": []}

    response = APIClient().post(URL, payload, format="json", HTTP_AUTHORIZATION=f"Bearer {key}")

    assert response.status_code == 200
    assert response.json()["recorded_progress"] == 0


# --------------------------------------------------------------------------- rates


def measured(
    job: Job, device_type: DeviceType, rate: float, *, seconds: float = 600.0, attempt: int = 1
) -> JobProgress:
    """An attempt of `job` that ran `seconds` on `device_type` at `rate` units per second."""
    end = timezone.now() - timedelta(minutes=5)
    return JobProgress.objects.create(
        job=job,
        attempt=attempt,
        device_type=device_type,
        first_progress=1000.0,
        first_at=end - timedelta(seconds=seconds),
        last_progress=1000.0 + rate * seconds,
        last_at=end,
    )


def program(job: Job) -> JobProgram:
    text = Job.objects.annotate(text=argv_text()).values_list("text", flat=True).get(pk=job.pk)
    return JobProgram(job.pk, job.image, text, job.num_gpus)


def test_a_jobs_own_rate_comes_first_then_runs_of_the_same_program(db: None) -> None:
    a100, k80 = DeviceTypeFactory(name="a100"), DeviceTypeFactory(name="k80", speed=0.5)
    earlier = JobFactory(command=["python", "resnet.py"], state=JobState.SUCCEEDED)
    measured(earlier, a100, 1000.0)
    measured(earlier, k80, 100.0, attempt=2)
    again = JobFactory(command=["python", "resnet.py"])
    measured(again, k80, 120.0)
    other_program = JobFactory(command=["python", "resnet.py", "--depth=152"])

    rates = measured_rates(jobs=[program(again), program(other_program)], now=timezone.now())

    # `again`: its own k80 rate, the program's a100 rate; nothing for another argv.
    assert list(rates) == [again.pk]
    assert dict(rates[again.pk]) == {"a100": pytest.approx(1000.0), "k80": pytest.approx(120.0)}


def test_rates_pool_attempts_by_time_and_skip_short_or_untyped_ones(db: None) -> None:
    a100 = DeviceTypeFactory(name="a100")
    job = JobFactory()
    measured(job, a100, 100.0, seconds=3000.0, attempt=1)
    measured(job, a100, 200.0, seconds=1000.0, attempt=2)
    measured(job, a100, 10_000.0, seconds=30.0, attempt=3)  # start-up noise: too short
    untyped = measured(job, a100, 10_000.0, attempt=4)
    JobProgress.objects.filter(pk=untyped.pk).update(device_type=None)

    rates = measured_rates(jobs=[program(job)], now=timezone.now())

    assert dict(rates[job.pk])["a100"] == pytest.approx((100 * 3000 + 200 * 1000) / 4000)


def test_the_snapshot_gives_a_pending_job_the_speeds_its_program_showed(db: None) -> None:
    a100, k80 = DeviceTypeFactory(name="a100", speed=1.0), DeviceTypeFactory(name="k80", speed=0.5)
    node = NodeFactory(name="mixed", simulated=True)
    DeviceFactory(node=node, index=0, device_type=a100)
    DeviceFactory(node=node, index=1, device_type=k80)
    earlier = JobFactory(command=["python", "resnet.py"], state=JobState.SUCCEEDED)
    measured(earlier, a100, 1000.0)
    measured(earlier, k80, 100.0, attempt=2)
    waiting = JobFactory(command=["python", "resnet.py"])
    unmeasured = JobFactory(command=["python", "other.py"])

    snapshot, _ = snapshot_build(now=timezone.now(), settings=scheduler_settings_from(configure()))

    speeds = {job.id: dict(job.throughputs) for job in snapshot.jobs}
    # 10x apart as measured, scaled to agree with the admin's 1.0 and 0.5 on average.
    assert speeds[waiting.pk] == {"a100": 2.24, "k80": 0.22}
    assert speeds[unmeasured.pk] == {}


@pytest.mark.parametrize("measured_before", [True, False])
def test_a_live_round_places_by_measured_speed(db: None, measured_before: bool) -> None:
    """AlloX gives the one fast device to the job that loses most on the slow one.

    The flat job was submitted first; with the admin's speeds only (both jobs 2x apart) it
    takes the A100 as the earlier job. With measured speeds (ResNet 10x apart, the
    recommender 1.1x) the ResNet takes the A100.
    """
    configure(placement="allox")
    a100, k80 = DeviceTypeFactory(name="a100", speed=1.0), DeviceTypeFactory(name="k80", speed=0.5)
    node = NodeFactory(name="mixed", simulated=True)
    DeviceFactory(node=node, index=0, device_type=a100)
    DeviceFactory(node=node, index=1, device_type=k80)
    resnet, recommender = ["python", "resnet.py"], ["python", "rec.py"]
    if measured_before:
        for command, fast, slow in ((resnet, 1000.0, 100.0), (recommender, 100.0, 90.0)):
            earlier = JobFactory(command=command, state=JobState.SUCCEEDED)
            measured(earlier, a100, fast)
            measured(earlier, k80, slow, attempt=2)
    owner = UserFactory()
    flat = job_submit(owner=owner, spec=JobSpec(image=JobFactory.image, command=recommender))
    steep = job_submit(owner=owner, spec=JobSpec(image=JobFactory.image, command=resnet))

    scheduling_round_run()

    placed = dict(
        Allocation.objects.filter(ended_at__isnull=True).values_list(
            "job_id", "device__device_type__name"
        )
    )
    if measured_before:
        assert placed == {steep.pk: "a100", flat.pk: "k80"}
    else:  # the earlier job takes the A100 (the other waits for it or takes the K80)
        assert placed[flat.pk] == "a100"


def test_the_owner_sees_the_measured_speed_on_the_job_page_and_others_see_no_page(
    db: None, client
) -> None:  # type: ignore[no-untyped-def]
    a100, k80 = DeviceTypeFactory(name="a100", speed=1.0), DeviceTypeFactory(name="k80", speed=0.5)
    job = JobFactory(command=["python", "resnet.py"])
    measured(job, a100, 1000.0)
    measured(job, k80, 100.0, attempt=2)

    client.force_login(job.owner)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    client.force_login(UserFactory())
    elsewhere = client.get(f"/jobs/{job.pk}/")

    assert "1000.0/s on a100 · 100.0/s on k80" in page
    assert elsewhere.status_code == 404


def test_the_api_gives_the_owner_the_measured_speed_and_hides_the_job_from_others(
    db: None,
) -> None:
    a100, k80 = DeviceTypeFactory(name="a100", speed=1.0), DeviceTypeFactory(name="k80", speed=0.5)
    job = JobFactory(command=["python", "resnet.py"])
    measured(job, a100, 1000.0)
    measured(job, k80, 100.0, attempt=2)
    client = APIClient()

    client.force_authenticate(job.owner)
    mine = client.get(f"/api/v1/jobs/{job.pk}/")
    client.force_authenticate(UserFactory())
    theirs = client.get(f"/api/v1/jobs/{job.pk}/")

    assert mine.json()["measured_speeds"] == {"a100": 1000.0, "k80": 100.0}
    assert theirs.status_code == 404


def test_the_submit_page_tells_students_how_to_report_progress(db: None, client) -> None:  # type: ignore[no-untyped-def]
    client.force_login(UserFactory())

    page = client.get("/jobs/submit/").content.decode()

    assert "GPULAB_PROGRESS_FILE" in page


def test_an_attempt_across_two_nodes_is_measured_from_one_of_them(two_nodes) -> None:
    here, there = two_nodes
    mine, theirs = here.devices.get(index=0), there.devices.get()
    job = running_on(mine, theirs)
    # Measured from the node of the attempt's lowest device id.
    first, other = (here, there) if mine.pk < theirs.pk else (there, here)

    heartbeat(first, [(job.pk, job.attempt, 100.0)], T0)
    ignored = heartbeat(other, [(job.pk, job.attempt, 7.0)], T0 + timedelta(seconds=5))
    heartbeat(first, [(job.pk, job.attempt, 700.0)], T0 + timedelta(minutes=1))

    assert ignored["recorded_progress"] == 0
    row = JobProgress.objects.get()
    assert (row.first_progress, row.last_progress) == (100.0, 700.0)
    assert row.device_type.name == "a100"
