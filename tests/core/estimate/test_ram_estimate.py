"""The system-RAM estimate: each setting a person turns moves the figure by its part, and the verdict follows
the machine's memory (over 95% refused, over 80% a warning)."""

from __future__ import annotations

from typing import Any

import pytest

from studio.core.config.files.paths import NO_FOLDER, ResolvedConfig, resolve_paths
from studio.core.config.schema import TrainConfig
from studio.core.estimate.ram.ram_estimate import describe_ram, estimate_ram, ram_fit, ram_problem
from studio.core.hardware.machine.probe import load_profile

GIB_MB = 1024
QWEN3_4B_PARAMS = 4022468096  # resources/architectures/zimage.json: the Z-Image text encoder
RTX4090 = load_profile("rtx4090-24gb").gpus[0]


def _config(family: str, **sections: dict[str, Any]) -> ResolvedConfig:
    data: dict[str, Any] = {"model": {"family": family, "base": "base-model"},
                            "dataset": {"concepts": [{"path": "images"}]}}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return resolve_paths(TrainConfig.model_validate(data), NO_FOLDER)


def _zimage(on_cpu: bool) -> ResolvedConfig:
    return _config("zimage", model={"dtype": "bf16", "text_encoder_on_cpu": on_cpu},
                   training={"mixed_precision": "bf16", "cache_latents": True, "cache_text_embeddings": True,
                             "gradient_checkpointing": True})


def test_the_text_encoder_on_the_cpu_moves_its_size_into_the_caching_phase() -> None:
    on_gpu, on_cpu = estimate_ram(_zimage(False), RTX4090, images=20), estimate_ram(_zimage(True), RTX4090, images=20)
    encoder_mb = QWEN3_4B_PARAMS * 2 / 2**20  # bf16, as loaded
    # While the caches fill, the encoder on the CPU embeds there: all of it is read for every batch.
    assert on_cpu.mb("text_encoders", "caching") == pytest.approx(encoder_mb)
    assert on_gpu.mb("text_encoders", "caching") == 0
    # ... and its embeddings are kept in system memory wherever it runs: 20 captions of 512 x 2560 bf16.
    assert on_cpu.mb("text_cache", "caching") == on_gpu.mb("text_cache", "caching") == pytest.approx(
        20 * (512 * 2560 + 512) * 2 / 2**20)
    assert on_cpu.phases["caching"] - on_gpu.phases["caching"] == pytest.approx(encoder_mb)
    # While training, an encoder that went to the GPU is parked in RAM as a copy; one that never left the
    # CPU stays mapped from its file (the system may drop it). 50 MB of embeddings fit the GPU's share.
    assert on_gpu.mb("text_encoders", "training") == pytest.approx(encoder_mb)
    assert on_cpu.mb("text_encoders", "training") == 0
    assert on_gpu.mb("text_cache", "training") == on_cpu.mb("text_cache", "training") == 0
    assert on_gpu.phases["training"] - on_cpu.phases["training"] == pytest.approx(encoder_mb)


def test_a_large_dataset_s_caption_embeddings_are_counted_in_system_memory_while_training() -> None:
    """FLUX.2 [klein] 9B keeps 12 MB a caption: 1,000 of them wait in system memory (12 GB), not on a 24 GB GPU;
    a few dozen go to the GPU's small share for the cached data."""
    config = _config("flux2-klein", model={"base": "black-forest-labs/FLUX.2-klein-base-9B", "dtype": "bf16",
                                           "fp8_base": True},
                     training={"mixed_precision": "bf16", "cache_latents": True, "cache_text_embeddings": True})
    each = 512 * 3 * 4096 * 2 / 2**20
    assert estimate_ram(config, RTX4090, images=1000).mb("text_cache", "training") == pytest.approx(1000 * each)
    assert estimate_ram(config, RTX4090, images=40).mb("text_cache", "training") == 0


def test_each_data_loading_worker_adds_a_process_and_its_batches() -> None:
    config = _config("sd15", training={"batch_size": 2, "mixed_precision": "fp16"})
    none = estimate_ram(config, RTX4090, images=10)
    four = estimate_ram(config.varied(config.model_copy(update={"training": config.training.model_copy(
        update={"dataloader_workers": 4})})), RTX4090, images=10)
    each = 600 + 2 * 2 * 3 * 512 * 512 * 4 / 2**20  # a process with torch, two batches of 2 decoded images ahead
    assert none.mb("workers", "training") == 0
    assert four.mb("workers", "training") == pytest.approx(4 * each)
    assert four.phases["training"] - none.phases["training"] == pytest.approx(4 * each)
    (part,) = [p for p in four.phase_parts["training"] if p.key == "workers"]
    assert part.detail == "4 x 0.60 GB (a process with torch, 2 decoded batches ahead)"
    # SD1.5 loads in under 5 GB (fp16 copies of its fp32 files): four workers make training the peak.
    assert describe_ram(none, 32768) == f"RAM: {none.total_gb:.1f} GB of 32 GB (peak while the model loads)"
    assert describe_ram(four, 32768) == f"RAM: {four.total_gb:.1f} GB of 32 GB (peak while training)"


def test_every_process_on_the_machine_loads_its_own_copy() -> None:
    one = estimate_ram(_config("sdxl", method={"kind": "dreambooth"}), RTX4090, images=0)
    two = estimate_ram(_config("sdxl", method={"kind": "dreambooth"}, launch={"num_processes": 2}), RTX4090, images=0)
    assert two.mb("baseline", "loading") == 2 * one.mb("baseline", "loading")
    assert two.mb("model_load", "loading") == pytest.approx(2 * one.mb("model_load", "loading"))
    # The files are mapped once for both: their pages are shared.
    assert two.mb("file_read", "loading") == one.mb("file_read", "loading")


def test_the_verdict_refuses_over_95_percent_and_warns_over_80() -> None:
    est = estimate_ram(_zimage(True), RTX4090, images=0)
    assert ram_fit(est, est.total_mb / 0.5) == "fits"
    assert ram_fit(est, est.total_mb / 0.9) == "tight"
    assert ram_fit(est, est.total_mb / 0.99) == "does_not_fit"
    assert ram_fit(est, 0) is None  # the machine's memory is not known: no verdict


def test_a_refusal_names_what_to_change_and_what_it_brings() -> None:
    config = _config("flux2-klein", model={"base": "black-forest-labs/FLUX.2-klein-base-9B", "dtype": "bf16",
                                           "fp8_base": True, "text_encoder_on_cpu": True},
                     training={"mixed_precision": "bf16", "cache_latents": True, "cache_text_embeddings": True})
    est = estimate_ram(config, RTX4090, images=0)
    assert round(est.total_gb, 1) == 26.2  # the fp8 transformer waits beside the 15.3 GB Qwen3-8B embedding
    verdict, message = ram_problem(config, RTX4090, 16384, est) or ("", "")
    assert verdict == "does_not_fit"
    assert message == (
        "The run needs about 26.2 GB of system RAM (peak while the caches fill: Text encoders on the CPU 15.3 GB, "
        "Flux2Transformer2DModel waiting (fp8) 8.5 GB), 164% of this machine's 16 GB, more than it can hold: keep "
        "the text encoder on the GPU (model.text_encoder_on_cpu = false; it needs GPU memory then) → 19.7 GB; even "
        "then this model needs 19.7 GB of RAM and this machine has 16 GB: add memory, use a machine with more, or "
        "choose a smaller model.")
    verdict, message = ram_problem(config, RTX4090, 32768, est) or ("", "")
    assert verdict == "tight"
    assert message.endswith("82% of this machine's 32 GB: other programs may push it into swap; to lower it, keep "
                            "the text encoder on the GPU (model.text_encoder_on_cpu = false; it needs GPU memory "
                            "then) → 19.7 GB.")
