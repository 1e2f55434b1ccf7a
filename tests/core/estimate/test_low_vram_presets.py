"""The 12 GB FLUX.2 [klein] 4B and Z-Image presets and the 24 GB 9B one keep their promise on a shipped card of
that size, because the caching phase holds the Qwen3 encoder without the transformer beside it."""

from __future__ import annotations

import pytest

from studio.core.config.files.presets import get_preset
from studio.core.estimate.estimate import TIGHT_MARGIN, available_mb, fit
from studio.core.estimate.plans.preset_estimate import estimate_preset
from studio.core.hardware.machine.probe import load_hardware

CARDS = [("flux2-klein-4b-lora-12gb", "rtx3060-12gb"), ("zimage-lora-12gb", "rtx3060-12gb"),
         ("flux2-klein-9b-lora-24gb", "rtx4090-24gb"), ("flux2-klein-4b-lora-16gb", "rtx4060ti-16gb"),
         ("zimage-lora-16gb", "rtx4060ti-16gb")]
# With the encoder on the CPU the caching phase holds the VAE alone: the steps or the samples are the peak.
ENCODER_ON_CPU = [("flux2-klein-4b-lora-8gb", "rtx4060-8gb"), ("flux2-klein-9b-lora-16gb", "rtx4060ti-16gb")]


@pytest.mark.parametrize(("preset_id", "profile"), CARDS)
def test_the_preset_fits_its_card_with_samples(preset_id: str, profile: str) -> None:
    gpu = load_hardware(profile).gpus[0]
    preset = get_preset(preset_id)
    result = estimate_preset(preset, gpu)
    est = result.estimate
    assert gpu.total_mb == pytest.approx(preset.min_vram_gb * 1024, rel=0.01)
    assert fit(est, gpu) == "fits", result.summary()
    assert est.sampling_peak_mb > 0  # with its sample images on
    # The caching phase is the peak and holds no transformer: with it beside the encoder it would not fit.
    assert est.total_mb == est.caching_peak_mb
    assert est.caching_peak_mb + est.weights_mb > available_mb(gpu) * (1 - TIGHT_MARGIN)
    assert "the model waits in system memory" in " ".join(est.notes)


def test_the_command_says_the_12gb_preset_keeps_its_promise(capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main as cli

    assert cli(["estimate", "--preset", "flux2-klein-4b-lora-12gb", "--hardware", "rtx3060-12gb"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Preset flux2-klein-4b-lora-12gb (FLUX.2 [klein] 4B LoRA (12 GB)): promises 12 GB")
    assert "The estimate keeps the promise." in out and "Verdict: fits" in out
    assert "3,876 M parameters, fp8 e4m3 (frozen)" in out  # the 4B's own architecture


@pytest.mark.parametrize(("preset_id", "profile"), ENCODER_ON_CPU)
def test_the_encoder_on_the_cpu_keeps_the_smallest_promises(preset_id: str, profile: str) -> None:
    gpu = load_hardware(profile).gpus[0]
    preset = get_preset(preset_id)
    result = estimate_preset(preset, gpu)
    est = result.estimate
    assert gpu.total_mb == pytest.approx(preset.min_vram_gb * 1024, rel=0.01)
    assert preset.delta["model"]["text_encoder_on_cpu"] is True
    assert fit(est, gpu) == "fits", result.summary()
    assert est.total_mb == est.sampling_peak_mb > est.training_peak_mb > est.caching_peak_mb
    assert est.caching_peak_mb < est.overhead_mb + 2048  # the VAE and its encode, no encoder, no transformer
