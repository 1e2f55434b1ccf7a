"""The estimate against what a GPU measured (resources/architectures/gpu_peaks.json): every point within
15% in sample, and within 15% for a fit made without it (leave one out); every fitted number names the
points it rests on, two at least."""

from __future__ import annotations

import math

import pytest

from studio.core.config.schema import TrainConfig
from studio.core.estimate import calibration_fit as cf
from studio.core.estimate.estimate import estimate_vram
from studio.core.estimate.memory_data import load_architecture, load_calibration, load_gpu_peaks

PEAKS = load_gpu_peaks()
POINTS = cf.gpu_points()
IDS = [p.id for p in POINTS]


def test_the_measurements_say_where_they_come_from() -> None:
    assert PEAKS["date"] == "2026-11-30" and "H200" in PEAKS["gpu"]
    assert {"torch", "cuda", "diffusers"} <= set(PEAKS["software"])
    assert len(POINTS) >= 8 and len(set(IDS)) == len(IDS)
    assert all(p.measured_mb > 0 and p.name for p in POINTS)


@pytest.mark.parametrize("point", POINTS, ids=IDS)
def test_estimate_is_within_15_percent_of_the_gpu(point: cf.Point) -> None:
    estimate = estimate_vram(point.config, cf.MEASURING_GPU).total_mb
    error = estimate / point.measured_mb - 1
    assert abs(error) <= 0.15, f"{point.name}: estimate {estimate / 1024:.2f} GB, measured {point.measured_mb / 1024:.2f} GB"


@pytest.fixture(scope="module")
def held_out() -> dict[str, cf.HeldOut]:
    rows = cf.leave_one_out(POINTS)
    print("\nleave one out: " + ", ".join(f"{h.point.id} {h.in_sample:+.1%} in sample, {h.left_out:+.1%} left out"
                                          for h in rows))
    return {h.point.id: h for h in rows}


@pytest.mark.parametrize("point_id", IDS)
def test_a_fit_made_without_the_point_is_within_15_percent_of_it(held_out: dict[str, cf.HeldOut],
                                                                 point_id: str) -> None:
    held = held_out[point_id]
    assert abs(held.left_out) <= 0.15, f"{held.point.name}: {held.left_out:+.1%} from a fit without it"


def test_every_fitted_number_names_the_points_it_rests_on_two_at_least() -> None:
    calibration = load_calibration()
    fitted = calibration["fit"]["fitted"]
    assert sorted(fitted) == sorted(cf.FITTED)
    shipped = {name: calibration["gpu"][name] for name in fitted}
    assert calibration["fit"]["rests_on"] == cf.rests_on(POINTS, shipped)
    for name in fitted:
        assert len(calibration["fit"]["rests_on"][name]) >= 2, name
    # Every other GPU number says how it was derived; the CPU ones, resting on one run, are provisional.
    gpu_numbers = {k for k, v in calibration["gpu"].items() if not isinstance(v, dict)} - set(fitted)
    gpu_numbers |= {f"activation_peak_factor.{k}" for k in calibration["gpu"]["activation_peak_factor"]}
    assert gpu_numbers <= set(calibration["fit"]["derived"])
    assert all(key.startswith("cpu.") for key in calibration["fit"]["provisional"])


def test_an_estimate_resting_on_a_single_run_says_so() -> None:
    config = POINTS[0].config
    cpu = estimate_vram(config, None)
    assert any(n.startswith("provisional: the CPU figures (activation_peak_factor.no_checkpointing") for n in cpu.notes)
    assert not any(n.startswith("provisional") for n in estimate_vram(config, cf.MEASURING_GPU).notes)


def test_the_shipped_numbers_are_the_fit() -> None:
    shipped = load_calibration()["gpu"]
    for name, value in cf.fit(POINTS).items():
        assert value == pytest.approx(shipped[name], rel=0.02, abs=2), name


def test_the_activation_factors_are_the_counted_step_over_the_saved_bytes() -> None:
    # Derived from the meta device, not fitted: the whole LoRA step's peak over what autograd saves.
    factors = load_calibration()["gpu"]["activation_peak_factor"]
    for checkpointing, name in ((False, "no_checkpointing"), (True, "checkpointing")):
        key = f"lora{'_checkpointing' if checkpointing else ''}_mixed"
        ratios = []
        for family in ("sd15", "sdxl", "sd3"):
            arch = load_architecture(family)
            step = arch["transients_mb"][f"lora_step{'_checkpointing' if checkpointing else ''}_mixed"]
            ratios.append(step / (arch["activations_mb"][key] + arch["model_copies_mb"][key]))
        assert factors[name] == math.ceil(max(ratios) * 100) / 100


def _full_bf16(batch: int) -> TrainConfig:
    return TrainConfig.model_validate({
        "model": {"family": "sd15", "base": "models/random-weights"}, "method": {"kind": "dreambooth"},
        "dataset": {"resolution": 512},
        "training": {"batch_size": batch, "mixed_precision": "bf16", "gradient_checkpointing": False,
                     "cache_latents": True, "cache_text_embeddings": True, "optimizer": "adamw"},
    })


def test_a_full_fine_tune_grows_with_the_batch_only_by_its_per_image_part() -> None:
    one, four = (estimate_vram(_full_bf16(b), cf.MEASURING_GPU) for b in (1, 4))
    arch, gpu = load_architecture("sd15"), load_calibration()["gpu"]
    per_image = arch["activations_mb"]["full_mixed"] * gpu["activation_peak_factor"]["no_checkpointing"]
    # Activations and the allocator's share of them are all that grows: 3 more images.
    assert four.total_mb - one.total_mb == pytest.approx(3 * per_image * (1 + gpu["allocator_fraction"]))
    parts = {p.key: p.mb for p in one.parts}
    assert parts == pytest.approx({p.key: p.mb for p in four.parts} | {
        "activations": parts["activations"], "allocator": parts["allocator"]})
    # The 16-bit weight copies autograd saves are counted once, not per image.
    copies = arch["model_copies_mb"]["full_mixed"]
    assert parts["weight_copies"] == pytest.approx(copies) and 1400 < copies < 1700  # 1,639 MB of bf16 weights
    assert four.activations_mb == pytest.approx(4 * per_image)
