from __future__ import annotations

import pytest
from django.core.management import call_command

from accounts.choices import Role
from accounts.models import LabGroup, User
from cluster.models import Device, Node
from cluster.selectors import max_gpus_grantable


@pytest.mark.django_db
def test_the_demo_seed_builds_the_mixed_lab_and_can_run_twice(capsys):
    call_command("demo_seed")
    call_command("demo_seed")
    assert Node.objects.count() == 5
    assert Device.objects.count() == 28
    assert max_gpus_grantable(accepted_types=["v100"], single_node=False) == 8
    assert max_gpus_grantable(accepted_types=[], single_node=True) == 8
    assert User.objects.get(username="admin").role == Role.ADMIN
    assert User.objects.filter(role=Role.STUDENT).count() == 4
    vision = LabGroup.objects.get(name="vision")
    assert list(vision.coordinators.values_list("username", flat=True)) == ["dana"]
    assert User.objects.get(username="alice").check_password("gpulab-demo")
    # An address, so the README's `--mail-type FAIL` works in the demo (mail goes to its log).
    assert User.objects.get(username="alice").email == "alice@demo.invalid"
    User.objects.filter(username="bob").update(email="")  # seeded before demo users had one
    call_command("demo_seed")
    assert User.objects.get(username="bob").email == "bob@demo.invalid"
    guarantees = dict(LabGroup.objects.values_list("name", "guaranteed_gpus"))
    assert guarantees == {"vision": None, "nlp": 8}
    out = capsys.readouterr().out
    assert "password for all: gpulab-demo" in out
    assert "dana   Student  groups: - (coordinates vision)" in out


@pytest.mark.django_db
def test_the_login_hint_names_the_default_address(capsys):
    call_command("demo_seed")
    assert "Log in at http://127.0.0.1:8000 with" in capsys.readouterr().out


@pytest.mark.django_db
def test_the_login_hint_names_the_address_the_demo_is_served_at(capsys):
    call_command("demo_seed", "--url", "http://127.0.0.1:8791")

    out = capsys.readouterr().out
    assert "Log in at http://127.0.0.1:8791 with" in out
    assert ":8000" not in out
