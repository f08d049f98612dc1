"""Seed the demo lab: a simulated mixed cluster, an admin and three students.

Idempotent: running it again refreshes the same rows and resets the demo passwords.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.choices import Role
from accounts.models import LabGroup, User
from accounts.services import user_create
from cluster.choices import Runtime
from cluster.services import DeviceSpec, device_type_upsert, node_register

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
GROUPS = [("vision", 2.0), ("nlp", 1.0)]
# (user name, role, groups)
PEOPLE = [
    ("admin", Role.ADMIN, []),
    ("alice", Role.STUDENT, ["vision"]),
    ("bob", Role.STUDENT, ["vision"]),
    ("carol", Role.STUDENT, ["nlp"]),
]
DEMO_PASSWORD = "gpulab-demo"


class Command(BaseCommand):
    help = "Create the demo lab (simulated cluster, admin and students)."

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
        for name, weight in GROUPS:
            groups[name], _ = LabGroup.objects.update_or_create(
                name=name, defaults={"weight": weight}
            )
        for username, role, group_names in PEOPLE:
            user = User.objects.filter(username=username).first()
            if user is None:
                user_create(
                    username=username,
                    password=DEMO_PASSWORD,
                    role=role,
                    groups=[groups[name] for name in group_names],
                )
            else:
                user.set_password(DEMO_PASSWORD)
                user.save(update_fields=["password"])
        gpus = sum(count for _, _, count in NODES)
        self.stdout.write(self.style.SUCCESS(f"Demo lab ready: {len(NODES)} nodes, {gpus} GPUs."))
        self.stdout.write(
            f"Log in at http://127.0.0.1:8000 with (password for all: {DEMO_PASSWORD}):"
        )
        for username, role, group_names in PEOPLE:
            groups_text = ", ".join(group_names) or "-"
            self.stdout.write(f"  {username:<6} {role.label:<8} groups: {groups_text}")
