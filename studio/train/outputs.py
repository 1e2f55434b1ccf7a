"""The finished model in RUN_DIR/output: LoRA files (diffusers + kohya) or a DreamBooth pipeline."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path, PureWindowsPath
from typing import Any

import torch

from studio.core.files import atomic_write_text
from studio.core.runs.folders import OUTPUT_DIR
from studio.train.components import Components
from studio.train.data.items import TrainItem
from studio.train.families.base import FamilyAdapter
from studio.train.families.model_spec import model_spec, training_fields

SAVE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SINGLE_FILE_ARCHITECTURES = {"sd15": "stable-diffusion-v1", "sdxl": "stable-diffusion-xl-v1-base"}
Warn = Callable[[str, "str | None", str], None]


def lora_layers(adapter: FamilyAdapter, components: Components) -> dict[str, dict[str, torch.Tensor]]:
    """peft-format LoRA state dicts keyed by the pipeline's component names."""
    from peft.utils import get_peft_model_state_dict

    layers = {adapter.denoiser_name: get_peft_model_state_dict(components.denoiser)}
    if adapter.config.method.train_text_encoder:
        for name, encoder in zip(adapter.text_encoder_names, adapter.trainable_encoders(components), strict=False):
            layers[name] = get_peft_model_state_dict(encoder)
    return layers


def _adapter_config(module: torch.nn.Module) -> dict[str, Any]:
    """The LoRA's peft config as the shared file stores it: the base model by name, not by path."""
    config = getattr(module, "peft_config", {}).get("default")
    data: dict[str, Any] = config.to_dict() if config is not None else {}
    if isinstance(data.get("base_model_name_or_path"), str):
        data["base_model_name_or_path"] = shared_model_name(data["base_model_name_or_path"])
    return data


def shared_model_name(base: str) -> str:
    """How a shared file names its base model: a hub id as it is, a local folder or file by its name
    only (its path would tell everyone the person's user name and folders)."""
    if "\\" in base:  # a Windows path
        return PureWindowsPath(base).name or base
    path = Path(base).expanduser()
    if path.is_absolute() or path.exists() or base.startswith((".", "~")):
        return path.name or base
    return base


def training_metadata(adapter: FamilyAdapter, items: list[TrainItem], step: int, started_at: float) -> dict[str, str]:
    """What a LoRA file says about its making (kohya's ss_* keys, which LoRA browsers show).

    The file is meant to be shared: it names the base model by file name or hub id, never by path.
    """
    config = adapter.config
    return {
        "ss_sd_model_name": Path(config.model.base).name,
        "ss_base_model": shared_model_name(config.model.base),
        **training_fields(config, items, step, started_at, time.time()),
        "modelspec.title": config.output.name,
    }


def save_outputs(adapter: FamilyAdapter, components: Components, run_dir: Path,
                 items: list[TrainItem], step: int, started_at: float, warn: Warn) -> list[Path]:
    """Write the run's outputs (rank 0 only) and a training_info.json beside them.

    `warn` tells the person about an asked-for format this run cannot write.
    """
    config = adapter.config
    folder = run_dir / OUTPUT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    metadata = training_metadata(adapter, items, step, started_at)
    if config.method.kind == "lora":
        written = adapter.save_lora(folder, *_lora_parts(adapter, components), metadata=metadata)
        if "single_file" in config.output.formats:
            warn("output.formats \"single_file\" applies to DreamBooth (a whole checkpoint); a LoRA is "
                 f"already single files: {', '.join(p.name for p in written)}", str(folder),
                 "remove \"single_file\" from output.formats for LoRA runs")
    else:
        dtype = SAVE_DTYPES[config.output.save_precision]
        written = adapter.save_full(folder, components, dtype)
        if "single_file" in config.output.formats:
            written += _single_file(adapter, components, folder, dtype, metadata, warn)
    info = {"family": config.model.family, "method": config.method.kind, "step": step,
            "latents": config.dataset.latents, "outputs": [str(p) for p in written], **metadata}
    atomic_write_text(folder / "training_info.json", json.dumps(info, indent=2))
    return written


def save_epoch_lora(adapter: FamilyAdapter, components: Components, run_dir: Path,
                    items: list[TrainItem], step: int, epoch: int, started_at: float) -> list[Path]:
    """The LoRA as it is at the end of `epoch` (rank 0 only): output/epoch-NNNN/, with the kohya
    file named `<output.name>-eNNNN` so files of several epochs can sit side by side in a UI."""
    config = adapter.config
    folder = run_dir / OUTPUT_DIR / f"epoch-{epoch:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {**training_metadata(adapter, items, step, started_at), "ss_epoch": str(epoch)}
    layers, configs = _lora_parts(adapter, components)
    return adapter.save_lora(folder, layers, configs, metadata=metadata, name=f"{config.output.name}-e{epoch:04d}")


def _lora_parts(adapter: FamilyAdapter, components: Components) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trained LoRA layers by component, and each component's adapter config."""
    layers = lora_layers(adapter, components)
    configs = {adapter.denoiser_name: _adapter_config(components.denoiser)}
    for name, encoder in zip(adapter.text_encoder_names, adapter.trainable_encoders(components), strict=False):
        if name in layers:
            configs[name] = _adapter_config(encoder)
    return layers, configs


def _single_file(adapter: FamilyAdapter, components: Components, folder: Path, dtype: torch.dtype,
                 metadata: dict[str, str], warn: Warn) -> list[Path]:
    """DreamBooth's one-file checkpoint in the original layout A1111/Forge/ComfyUI load, where one exists."""
    from studio.train.pipelines.single_file import save_single_file

    config = adapter.config
    family = config.model.family
    if family not in SINGLE_FILE_ARCHITECTURES:
        warn(f"output.formats \"single_file\" is not available for {family} yet; the diffusers pipeline "
             f"folder {folder} was written instead", str(folder),
             "load the folder with diffusers, or convert it with your UI's own tools")
        return []
    meta = {**metadata, **model_spec(config, SINGLE_FILE_ARCHITECTURES[family], lora=False, now=time.time())}
    path = folder / f"{config.output.name}.safetensors"
    return [save_single_file(path, family, components, dtype, meta)]
