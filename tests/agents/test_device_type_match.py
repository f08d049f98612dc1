"""A GPU registers under the device type whose name is whole words of its NVML model
name, longest first; otherwise under a new type for an admin to rate."""

from __future__ import annotations

import pytest

from agents.heartbeats import _device_type_for
from tests.factories import DeviceTypeFactory


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("types", "model", "expected"),
    [
        (["a100"], "NVIDIA A100-SXM4-80GB", "a100"),
        (["a10", "a100"], "NVIDIA A100-SXM4-80GB", "a100"),
        (["a10"], "NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),  # not a10
        (["a10"], "NVIDIA A10G", "a10g"),
        (["a10"], "NVIDIA A10", "a10"),
        (["l4"], "NVIDIA L40S", "l40s"),  # not l4
        (["l4"], "NVIDIA L4", "l4"),
        (["p4"], "Tesla P40", "tesla-p40"),  # not p4
        (["t4"], "Tesla T4", "t4"),
        (["a100", "a100-80gb"], "NVIDIA A100 80GB PCIe", "a100-80gb"),  # longest
        (["rtx4090"], "NVIDIA GeForce RTX 4090", "rtx4090"),  # words joined
        (["v100"], "Tesla V100-SXM2-16GB", "v100"),
        (["h100-80gb-hbm3"], "NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
    ],
)
def test_a_gpu_model_matches_a_type_by_whole_words(
    types: list[str], model: str, expected: str
) -> None:
    for name in types:
        DeviceTypeFactory(name=name)

    assert _device_type_for(model).name == expected
