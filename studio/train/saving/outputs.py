"""The finished model in RUN_DIR/output: LoRA files (diffusers + kohya) or a DreamBooth pipeline."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PureWindowsPath
from typing import Any

import torch

from studio.core.families import FAMILIES
from studio.core.files import atomic_write_text, replace
from studio.core.runs.folders import OUTPUT_DIR
from studio.train.components import Components
from studio.train.data.items import TrainItem
from studio.train.errors import write_failure
from studio.train.families.base import FamilyAdapter
from studio.train.families.model_spec import model_spec, prediction_type, training_fields
from studio.train.weights.ema import WeightAverage

EMA_DIFFUSERS_FILE = "pytorch_lora_weights_ema.safetensors"
EMA_FOLDER = "ema"
SAVE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# The model-spec architecture of each family that has a single-file layout.
SINGLE_FILE_ARCHITECTURES = {spec.name: spec.modelspec_architecture for spec in FAMILIES if spec.modelspec_architecture}
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
    from studio.train.networks.lycoris import adapter_scales

    config = getattr(module, "peft_config", {}).get("default")
    data: dict[str, Any] = config.to_dict() if config is not None else {}
    if data.get("peft_type") in ("LOHA", "LOKR"):
        data["lycoris_scales"] = adapter_scales(module)
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


def training_metadata(adapter: FamilyAdapter, components: Components, items: list[TrainItem], step: int,
                      started_at: float) -> dict[str, str]:
    """What a LoRA file says about its making (kohya's ss_* keys, which LoRA browsers show), and what its model
    predicts as the base model's training scheduler says (model.prediction_type = "auto" leaves it to that).

    The file is meant to be shared: it names the base model by file name or hub id, never by path.
    """
    config = adapter.config
    scheduler = getattr(getattr(components.scheduler, "config", None), "prediction_type", None)
    return {
        "modelspec.prediction_type": prediction_type(config, scheduler if isinstance(scheduler, str) else None),
        "ss_sd_model_name": Path(config.model.base).name,
        "ss_base_model": shared_model_name(config.model.base),
        **training_fields(config, items, step, started_at, time.time()),
        "modelspec.title": config.output.name,
    }


def save_outputs(adapter: FamilyAdapter, components: Components, run_dir: Path,
                 items: list[TrainItem], step: int, started_at: float, warn: Warn,
                 ema: WeightAverage | None = None) -> list[Path]:
    """Write the run's outputs (rank 0 only) and a training_info.json beside them.

    Everything is written into a hidden folder inside output/ first and moved into place
    once complete (a rename on the same disk needs no space): a full disk leaves no half
    output, and its error names the file and about how much the outputs need.
    `warn` tells the person about an asked-for format this run cannot write. With an `ema`, its
    averaged weights are written beside the raw ones (`ema_outputs`).
    """
    folder = run_dir / OUTPUT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for left in folder.glob(".writing-*"):  # a save killed halfway
        shutil.rmtree(left, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder))
    try:
        written = _write_outputs(adapter, components, staging, items, step, started_at, warn, ema)
        placed = [folder / p.relative_to(staging) for p in written]
        for entry in sorted(staging.iterdir()):
            target = folder / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            replace(entry, target)  # on Windows, tried again while the antivirus scans the file just written
    except Exception as exc:  # a full disk is an OSError, a RuntimeError (torch) or a SafetensorError
        what = _file_being_written(exc, staging, folder)
        shutil.rmtree(staging, ignore_errors=True)  # no half output; its room is free for the error event
        needed = output_bytes(adapter, components) * (2 if ema is not None else 1)
        failure = write_failure(exc, folder, needed, f"the outputs ({what})")
        if failure is not None:
            raise failure from None
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return placed


def _write_outputs(adapter: FamilyAdapter, components: Components, folder: Path,
                   items: list[TrainItem], step: int, started_at: float, warn: Warn,
                   ema: WeightAverage | None = None) -> list[Path]:
    config = adapter.config
    metadata = training_metadata(adapter, components, items, step, started_at)
    if config.method.kind == "lora":
        written = adapter.save_lora(folder, *_lora_parts(adapter, components), metadata=metadata)
        if "single_file" in config.output.formats:
            warn("output.formats \"single_file\" applies to DreamBooth (a whole checkpoint); a LoRA is "
                 f"already single files: {', '.join(p.name for p in written)}", str(folder.parent),
                 "remove \"single_file\" from output.formats for LoRA runs")
    else:
        dtype = SAVE_DTYPES[config.output.save_precision]
        written = adapter.save_full(folder, components, dtype)
        if "single_file" in config.output.formats:
            written += _single_file(adapter, components, folder, dtype, metadata, warn, final=folder.parent)
    if ema is not None:
        with ema.applied():
            written += ema_outputs(adapter, components, folder, metadata)
    info = {"family": config.model.family, "method": config.method.kind, "step": step,
            "latents": config.dataset.latents,
            "outputs": [str(folder.parent / p.relative_to(folder)) for p in written], **metadata}
    atomic_write_text(folder / "training_info.json", json.dumps(info, indent=2))
    return written


def ema_outputs(adapter: FamilyAdapter, components: Components, folder: Path, metadata: dict[str, str]) -> list[Path]:
    """The averaged weights (already in the model) beside the raw ones: a LoRA's files as
    `<output.name>-ema.safetensors` and `pytorch_lora_weights_ema.safetensors`, a full fine-tune's
    pipeline as the folder `ema/` and, where output.formats asks for the single file, as
    `<output.name>-ema.safetensors` beside `<output.name>.safetensors` (without it, a person who loads
    single files in their UI had the raw weights only)."""
    config = adapter.config
    meta = {**metadata, "modelspec.title": f"{config.output.name} (EMA)", "ss_ema": "True"}
    if config.method.kind == "lora":
        return adapter.save_lora(folder, *_lora_parts(adapter, components), metadata=meta,
                                 name=f"{config.output.name}-ema", weight_name=EMA_DIFFUSERS_FILE)
    dtype = SAVE_DTYPES[config.output.save_precision]
    written = adapter.save_full(folder / EMA_FOLDER, components, dtype)
    if "single_file" in config.output.formats and config.model.family in SINGLE_FILE_ARCHITECTURES:
        written.append(_single_file_checkpoint(adapter, components, folder / f"{config.output.name}-ema.safetensors",
                                               dtype, meta))
    return written


def _file_being_written(exc: BaseException, staging: Path, folder: Path) -> str:
    """The output file a failed save was writing: the error's own, else the newest one begun."""
    filename = getattr(exc, "filename", None)
    if isinstance(filename, str) and filename:
        path = Path(filename)
        return str(folder / path.relative_to(staging)) if path.is_relative_to(staging) else filename
    begun = [p for p in staging.rglob("*") if p.is_file()]
    if not begun:
        return str(folder)
    newest = max(begun, key=lambda p: p.stat().st_mtime_ns)
    return str(folder / newest.relative_to(staging))


def output_bytes(adapter: FamilyAdapter, components: Components) -> int:
    """About what the outputs take on disk: the trained weights (LoRA) or the whole pipeline
    (DreamBooth) at the save precision, once per file format written."""
    config = adapter.config
    size = torch.finfo(SAVE_DTYPES[config.output.save_precision]).bits // 8
    formats = config.output.formats
    if config.method.kind == "lora":
        params = sum(t.numel() for layer in lora_layers(adapter, components).values() for t in layer.values())
        copies = sum(f in formats for f in ("diffusers", "kohya")) or 1
    else:
        modules = [components.denoiser, *components.text_encoders, components.vae]
        params = sum(p.numel() for m in modules for p in m.parameters())
        copies = 2 if "single_file" in formats else 1
    return params * size * copies + 2**20


def save_epoch_lora(adapter: FamilyAdapter, components: Components, run_dir: Path,
                    items: list[TrainItem], step: int, epoch: int, started_at: float) -> list[Path]:
    """The LoRA as it is at the end of `epoch` (rank 0 only): output/epoch-NNNN/, with the kohya
    file named `<output.name>-eNNNN` so files of several epochs can sit side by side in a UI."""
    config = adapter.config
    output = run_dir / OUTPUT_DIR
    folder = output / f"epoch-{epoch:04d}"
    metadata = {**training_metadata(adapter, components, items, step, started_at), "ss_epoch": str(epoch)}
    layers, configs = _lora_parts(adapter, components)
    # Written beside the folder first and moved into place once complete, as the final outputs are: a full
    # disk left a half-written file in epoch-NNNN that UIs list and cannot load (save_outputs clears the rest).
    output.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=output))
    try:
        written = adapter.save_lora(staging, layers, configs, metadata=metadata,
                                    name=f"{config.output.name}-e{epoch:04d}")
        if folder.is_dir():
            shutil.rmtree(folder)
        replace(staging, folder)  # on Windows, tried again while the antivirus scans the files just written
    except Exception as exc:  # a full disk is an OSError, a RuntimeError (torch) or a SafetensorError
        what = _file_being_written(exc, staging, folder)
        shutil.rmtree(staging, ignore_errors=True)
        failure = write_failure(exc, output, output_bytes(adapter, components), f"the LoRA of epoch {epoch} ({what})")
        if failure is not None:
            raise failure from None
        raise
    return [folder / p.relative_to(staging) for p in written]


def check_kohya_layout(adapter: FamilyAdapter, components: Components) -> None:
    """Lay the freshly added LoRA out as its kohya-format file will be, before the first step: a layer the family's
    readers have no name for (a FLUX.2 modulation layer, DoRA on part of a fused q/k/v) is refused now with what to
    do, not when the outputs are written after the whole training (which then ended with no file at all).
    Each DoRA layer's dora_scale stands in as ones (its value needs the trained weights, its name does not)."""
    from studio.train.networks.dora import MAGNITUDE

    config = adapter.config
    if config.method.kind != "lora" or config.method.network in ("loha", "lokr") or "kohya" not in config.output.formats:
        return
    layers = {name: {key: value.detach() for key, value in state.items()}
              for name, state in lora_layers(adapter, components).items()}
    modules = {adapter.denoiser_name: components.denoiser}
    modules.update(zip(adapter.text_encoder_names, adapter.trainable_encoders(components), strict=False))
    configs = {name: _adapter_config(modules[name]) for name in layers}
    for name, state in layers.items():
        configs[name]["dora_scales"] = {key.removesuffix(f".{MAGNITUDE}"): value.new_ones(value.shape[0], 1)
                                        for key, value in state.items() if key.endswith(f".{MAGNITUDE}")}
    adapter.kohya_layout(layers, configs)


def _lora_parts(adapter: FamilyAdapter, components: Components) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trained LoRA layers by component, and each component's adapter config."""
    from studio.train.networks.dora import MAGNITUDE, comfy_dora_scales

    layers = lora_layers(adapter, components)
    modules = {adapter.denoiser_name: components.denoiser}
    for name, encoder in zip(adapter.text_encoder_names, adapter.trainable_encoders(components), strict=False):
        if name in layers:
            modules[name] = encoder
    configs = {name: _adapter_config(module) for name, module in modules.items()}
    for name, module in modules.items():
        magnitudes = [key for key in layers[name] if key.endswith(f".{MAGNITUDE}")]
        if magnitudes:  # DoRA: the kohya file holds what ComfyUI applies, which needs the base weights
            configs[name]["dora_scales"] = comfy_dora_scales(module, magnitudes)
    return layers, configs


def _single_file(adapter: FamilyAdapter, components: Components, folder: Path, dtype: torch.dtype,
                 metadata: dict[str, str], warn: Warn, final: Path) -> list[Path]:
    """DreamBooth's one-file checkpoint in the original layout A1111/Forge/ComfyUI load, where one exists."""
    config = adapter.config
    family = config.model.family
    if family not in SINGLE_FILE_ARCHITECTURES:
        warn(f"output.formats \"single_file\" is not available for {family} yet; the diffusers pipeline "
             f"folder {final} was written instead", str(final),
             "load the folder with diffusers, or convert it with your UI's own tools")
        return []
    return [_single_file_checkpoint(adapter, components, folder / f"{config.output.name}.safetensors", dtype,
                                    metadata)]


def _single_file_checkpoint(adapter: FamilyAdapter, components: Components, path: Path, dtype: torch.dtype,
                            metadata: dict[str, str]) -> Path:
    """The components as one checkpoint at `path`, with the model-spec fields a UI reads its kind from."""
    from studio.train.pipelines.single_file import prediction_markers, save_single_file

    # The family's architecture, or the loaded base's version of it (SD 2.x trains as SD 1.x/2.x).
    architecture = adapter.kohya_architecture_name()
    meta = {**model_spec(adapter.config, architecture, lora=False, now=time.time()), **metadata}
    markers = prediction_markers(meta["modelspec.prediction_type"], components.scheduler)
    return save_single_file(path, adapter.config.model.family, components, dtype, meta, markers)
