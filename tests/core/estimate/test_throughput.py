"""FLOPs per image, the GPU peak table and MFU: the arithmetic behind the Train page's MFU."""

from __future__ import annotations

import pytest

from studio.core.estimate.throughput import (
    forward_tflop,
    gpu_peak,
    is_counted_architecture,
    load_flops,
    mfu,
    step_multiplier,
)


def test_counted_forward_flops_are_the_published_architectures() -> None:
    # Counted with FlopCounterMode on the meta device (benchmarks/count_flops.py).
    assert forward_tflop("sd15", 512, 512) == pytest.approx(0.80, abs=0.005)
    assert forward_tflop("sdxl", 1024, 1024) == pytest.approx(6.76, abs=0.005)
    assert forward_tflop("sd3", 1024, 1024) == pytest.approx(8.90, abs=0.005)


def test_other_sizes_scale_with_the_pixels() -> None:
    assert forward_tflop("sdxl", 512, 512) == pytest.approx(forward_tflop("sdxl", 1024, 1024) / 4)
    assert forward_tflop("sd15", 768, 512) == pytest.approx(forward_tflop("sd15", 512, 512) * 1.5)


def test_a_step_costs_forwards_by_method_and_checkpointing() -> None:
    assert step_multiplier(full_finetune=False, gradient_checkpointing=False) == 2.0
    assert step_multiplier(full_finetune=False, gradient_checkpointing=True) == 3.0
    assert step_multiplier(full_finetune=True, gradient_checkpointing=False) == 3.0
    assert step_multiplier(full_finetune=True, gradient_checkpointing=True) == 4.0
    # Checkpointing every second block recomputes half a forward.
    assert step_multiplier(False, True, checkpointing_interval=2) == 2.5


def test_only_the_counted_architecture_gets_flops() -> None:
    params = int(load_flops()["sdxl"]["params"])
    assert is_counted_architecture("sdxl", params)
    assert not is_counted_architecture("sdxl", 2_000_000)  # a tiny test model
    assert not is_counted_architecture("sd3", 8_000_000_000)  # SD 3.5 large is not SD3-medium


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H200", 790.0),
    ("NVIDIA H100 80GB HBM3", 790.0),
    ("NVIDIA H100 PCIe", 756.5),
    ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA GeForce RTX 4090", 165.2),
    ("NVIDIA GeForce RTX 4090 D", 147.1),
    ("NVIDIA GeForce RTX 3090", 71.0),
    ("NVIDIA GeForce RTX 3090 Ti", 80.0),
    ("NVIDIA GeForce RTX 3060", 25.5),
    ("NVIDIA L40S", 362.05),
    ("NVIDIA L40", 181.05),
    ("NVIDIA L4", 121.0),
    ("NVIDIA A10", 125.0),
])
def test_gpu_names_find_their_peak(name: str, peak: float) -> None:
    found = gpu_peak(name)
    assert found is not None and found.tflops == peak


def test_unknown_gpus_have_no_peak() -> None:
    assert gpu_peak("NVIDIA A10G") is None  # not A10: another card
    assert gpu_peak("Apple M2 Max") is None


def test_mfu_of_the_issue_measurements() -> None:
    # Measured on one H200, batch 4, LoRA: images/s x forward TFLOP x 2 / 790.
    h200 = gpu_peak("NVIDIA H200")
    for family, images_per_s, expected in (("sd15", 34.7, 0.07), ("sdxl", 9.5, 0.16), ("sd3", 12.7, 0.29)):
        native = int(load_flops()[family]["resolution"])
        tflops = images_per_s * forward_tflop(family, native, native) * step_multiplier(False, False)
        assert mfu(tflops, h200, "bf16") == pytest.approx(expected, abs=0.006)


def test_mfu_needs_a_peak_and_half_precision() -> None:
    rtx = gpu_peak("NVIDIA GeForce RTX 4090")
    assert mfu(82.6, rtx, "fp16") == pytest.approx(0.5)
    assert mfu(82.6, rtx, "no") is None  # fp32 training is not measured against the fp16 peak
    assert mfu(82.6, None, "bf16") is None
    assert mfu(50.0, gpu_peak("Tesla V100-SXM2-16GB"), "bf16") is None  # no bf16 tensor cores
