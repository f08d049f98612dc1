"""factory_boy factories for the Django models."""

from __future__ import annotations

import factory

from accounts.choices import Role
from accounts.models import LabGroup, User
from cluster.choices import DeviceKind, Runtime
from cluster.models import Device, DeviceType, Node
from jobs.choices import JobState
from jobs.models import Job


class LabGroupFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LabGroup
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"group{n}")


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    role = Role.STUDENT
    password = factory.django.Password("pw-for-tests")


class DeviceTypeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DeviceType
        django_get_or_create = ("name",)

    name = "v100"
    speed = 1.0


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"node{n}")
    address = "127.0.0.1"
    runtime = Runtime.PROCESS


class DeviceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Device

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n)
    uuid = factory.Sequence(lambda n: f"GPU-test-{n:08d}")
    kind = DeviceKind.GPU
    device_type = factory.SubFactory(DeviceTypeFactory)


class JobFactory(factory.django.DjangoModelFactory):
    """A job row written directly (for tests of later transitions), not via job_submit."""

    class Meta:
        model = Job

    owner = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"job{n}")
    image = "pytorch/pytorch:2.4.0"
    command = factory.LazyFunction(lambda: ["python", "train.py"])
    num_gpus = 1
    state = JobState.PENDING
