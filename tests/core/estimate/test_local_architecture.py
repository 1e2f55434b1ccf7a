"""A model folder smaller than its family's published architecture (the demo's tiny model) is
estimated at its own size, read from its safetensors headers; a full-size folder as published."""

from __future__ import annotations

from pathlib import Path

from fixtures.checkpoints import diffusers_folder, write_checkpoint

from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
from studio.core.estimate.estimate import estimate_vram
from studio.core.estimate.local_architecture import folder_params, local_architecture, safetensors_params
from studio.core.estimate.memory_data import load_architecture
from studio.core.hardware.machine.probe import load_hardware


def config_for(base: Path) -> TrainConfig:
    return TrainConfig(model=ModelSection(family="sd15", base=str(base)),
                       dataset=DatasetSection(concepts=[ConceptSection(path="data")]))


def test_the_header_gives_the_parameter_count(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "a.safetensors", {"w": [3, 4, 5], "b": [7]})
    assert safetensors_params(tmp_path / "a.safetensors") == 67
    assert folder_params(tmp_path) == 67
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "x.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    assert folder_params(tmp_path / "broken") is None  # not a safetensors file: the published size stays


def test_a_tiny_model_folder_is_estimated_at_its_own_size(tmp_path: Path) -> None:
    gpu = load_hardware("rtx3060-12gb").gpus[0]
    published = estimate_vram(config_for(tmp_path / "nowhere"), gpu)
    tiny = estimate_vram(config_for(diffusers_folder(tmp_path / "my-model", 800_000)), gpu)
    assert published.total_gb > 4.0
    assert tiny.total_gb < 1.0 and tiny.total_gb < published.total_gb / 4
    weights = next(p for p in tiny.parts if p.key == "weights")
    assert weights.detail.startswith("1 M parameters")
    assert any(n.startswith("sized for my-model: 0.8 M denoiser parameters (the full-size sd15 has 860 M)")
               for n in tiny.notes)


def test_a_full_size_folder_keeps_the_published_architecture(tmp_path: Path) -> None:
    arch = load_architecture("sd15")
    folder = diffusers_folder(tmp_path / "my-model", int(arch["components"]["unet"]["params"] * 1.02))
    assert local_architecture(arch, str(folder)) is arch
    assert local_architecture(arch, "runwayml/stable-diffusion-v1-5") is arch  # a hub id
    assert local_architecture(arch, "models/relative") is arch  # not resolved: nothing to read


def test_a_folder_with_its_fp16_and_ema_files_beside_the_weights_is_counted_once(tmp_path: Path) -> None:
    """A clone of a hub repository keeps the fp16 and non-EMA files beside each weight file: the estimate counts the
    weights a load reads (the plain files, or one variant's where there are no others), not all of them together,
    which made a full-size folder three times the published model."""
    arch = load_architecture("sd15")
    params = int(arch["components"]["unet"]["params"])
    folder = diffusers_folder(tmp_path / "stable-diffusion-v1-5", params)
    unet = folder / "unet"
    for variant in ("fp16", "non_ema"):
        write_checkpoint(unet / f"diffusion_pytorch_model.{variant}.safetensors",
                         {"conv_in.weight": [params // 2], "conv_out.weight": [params - params // 2]}, with_data=False)
    assert folder_params(unet) == params
    assert local_architecture(arch, str(folder)) is arch
    for plain in unet.glob("diffusion_pytorch_model.safetensors"):
        plain.unlink()  # fp16 files only (loaded with model.variant = "fp16"): one variant counted
    assert folder_params(unet) == params
