"""Seed the demo lab: a simulated mixed cluster, an admin and three students.

Idempotent: running it again refreshes the same rows and resets the demo passwords.
"""

from __future__ import annotations

import csv
from pathlib import Path

from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.choices import Role
from accounts.models import LabGroup, User
from accounts.services import user_create
from cluster.choices import Runtime
from cluster.services import DeviceSpec, device_type_upsert, node_register
from jobs.models import Job
from jobs.services import JobSpec, job_submit
from scheduler.selectors import scheduler_config_get

# (device type, relative speed vs V100, model name, memory MiB)
DEVICE_TYPES = [
    ("a100", 2.0, "NVIDIA A100-SXM4-80GB", 81920),
    ("v100", 1.0, "Tesla V100-SXM2-32GB", 32768),
    ("rtx3090", 1.2, "NVIDIA GeForce RTX 3090", 24576),
]
# (node name, device type, GPUs)
NODES = [
    ("a100-0", "a100", 8),
    ("a100-1", "a100", 8),
    ("v100-0", "v100", 4),
    ("v100-1", "v100", 4),
    ("rtx-0", "rtx3090", 4),
]
# (name, fair-share weight, guaranteed GPUs): nlp's guarantee shows reclaim in the demo.
GROUPS = [("vision", 2.0, None), ("nlp", 1.0, 8)]
# (user name, role, groups)
PEOPLE = [
    ("admin", Role.ADMIN, []),
    ("alice", Role.STUDENT, ["vision"]),
    ("bob", Role.STUDENT, ["vision"]),
    ("carol", Role.STUDENT, ["nlp"]),
    ("dana", Role.STUDENT, []),
]
# Group coordinators (Slurm's): dana, vision's PI, submits nothing but sees and cancels the
# group's jobs.
COORDINATORS = {"vision": ["dana"]}
DEMO_PASSWORD = "gpulab-demo"


def demo_email(username: str) -> str:
    """An address for `--mail-type` to accept; `.invalid` never resolves, and the demo's
    mail goes to its log (Django's console backend) anyway."""
    return f"{username}@demo.invalid"


# The public Tiresias 60-job trace (Apache-2.0), copied into the repo; durations in seconds.
DEMO_TRACE = Path(__file__).resolve().parents[3] / "scheduler" / "data" / "tiresias_60_job.csv"
DEMO_JOBS = 40
# gpulab's defaults scaled down (queues from 60 GPU-s instead of 100, clocks in minutes
# instead of tens of minutes) so a newcomer sees demotion, preemption and the starvation
# guard within minutes.
DEMO_SCHEDULER = {
    "queue_thresholds": [60.0 * 2**i for i in range(8)],
    "round_interval_seconds": 5.0,
    "preemption_grace_seconds": 5,
    "min_runtime_seconds": 60.0,
    "preempt_patience_seconds": 60.0,
    "starvation_seconds": 900.0,
}


# Where `make demo` serves the app unless told otherwise (Makefile HOST and PORT).
DEFAULT_URL = "http://127.0.0.1:8000"


class Command(BaseCommand):
    help = "Create the demo lab (simulated cluster, admin and students)."

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument(
            "--url",
            default=DEFAULT_URL,
            help=f"The address the demo is served at, shown in the login hint ({DEFAULT_URL}).",
        )

    @transaction.atomic
    def handle(self, *args, **options) -> None:  # type: ignore[no-untyped-def]
        models = {name: (model, memory) for name, _, model, memory in DEVICE_TYPES}
        for name, speed, _, _ in DEVICE_TYPES:
            device_type_upsert(name=name, speed=speed)
        for node_name, device_type, count in NODES:
            model_name, memory = models[device_type]
            node_register(
                name=node_name,
                address="127.0.0.1",
                runtime=Runtime.PROCESS,
                simulated=True,
                devices=[
                    DeviceSpec(
                        index=index,
                        uuid=f"GPU-demo-{node_name}-{index}",
                        device_type=device_type,
                        model_name=model_name,
                        memory_mb=memory,
                    )
                    for index in range(count)
                ],
            )
        groups = {}
        for name, weight, guaranteed in GROUPS:
            groups[name], _ = LabGroup.objects.update_or_create(
                name=name, defaults={"weight": weight, "guaranteed_gpus": guaranteed}
            )
        for username, role, group_names in PEOPLE:
            user = User.objects.filter(username=username).first()
            if user is None:
                user_create(
                    username=username,
                    password=DEMO_PASSWORD,
                    role=role,
                    email=demo_email(username),
                    groups=[groups[name] for name in group_names],
                )
            else:
                user.set_password(DEMO_PASSWORD)
                user.email = user.email or demo_email(username)
                user.save(update_fields=["password", "email"])
        for name, usernames in COORDINATORS.items():
            groups[name].coordinators.set(User.objects.filter(username__in=usernames))
        config = scheduler_config_get()
        for name, value in DEMO_SCHEDULER.items():
            setattr(config, name, value)
        config.full_clean()
        config.save()
        submitted = 0 if Job.objects.exists() else self._submit_trace_jobs()
        gpus = sum(count for _, _, count in NODES)
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo lab ready: {len(NODES)} nodes, {gpus} GPUs, {submitted} trace jobs queued."
            )
        )
        self.stdout.write(f"Log in at {options['url']} with (password for all: {DEMO_PASSWORD}):")
        for username, role, group_names in PEOPLE:
            groups_text = ", ".join(group_names) or "-"
            coordinates = [name for name, users in COORDINATORS.items() if username in users]
            also = f" (coordinates {', '.join(coordinates)})" if coordinates else ""
            self.stdout.write(f"  {username:<6} {role.label:<8} groups: {groups_text}{also}")

    def _submit_trace_jobs(self) -> int:
        """Queue the first DEMO_JOBS jobs of the Tiresias trace, shared among the students.

        Each runs `sleep <trace duration>` on the simulated nodes, through the real
        submission service, so the queue, preemptions and completions are the real ones.
        """
        students = [
            User.objects.get(username=name)
            for name, role, group_names in PEOPLE
            if role == Role.STUDENT and group_names
        ]
        with DEMO_TRACE.open() as trace:
            rows = list(csv.DictReader(trace))[:DEMO_JOBS]
        for number, row in enumerate(rows):
            job_submit(
                owner=students[number % len(students)],
                spec=JobSpec(
                    name=f"{row['model_name']}-{row['job_id']}",
                    image="pytorch/pytorch:2.4.0",
                    command=["sleep", row["duration"]],
                    num_gpus=int(row["num_gpu"]),
                ),
            )
        return len(rows)
