"""Checkpoints: accelerate's state (optimizer, scheduler, RNG, scaler) plus only the trained weights.

A checkpoint folder is complete once `training_state.json` is in it; that file is
written last, so a run killed while saving resumes from the previous checkpoint.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import torch

from studio.core.files import atomic_write_text
from studio.core.runs.folders import CHECKPOINTS_DIR

STATE_FILE = "training_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS_DIR / f"step-{step}"


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint, oldest first."""
    folder = run_dir / CHECKPOINTS_DIR
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def read_state(folder: Path) -> dict[str, Any]:
    return json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().contiguous() for name, p in model.named_parameters() if p.requires_grad}


def register_hooks(accelerator: Any) -> None:
    """Save and load only the parameters being trained (a LoRA checkpoint stays small)."""
    from safetensors.torch import load_file, save_file

    def save_hook(models: list[torch.nn.Module], weights: list[Any], output_dir: str) -> None:
        if accelerator.is_main_process:
            for i, model in enumerate(models):
                state = {k: v.cpu() for k, v in trainable_state(accelerator.unwrap_model(model)).items()}
                save_file(state, str(Path(output_dir) / f"trainable_{i}.safetensors"))
        weights.clear()

    def load_hook(models: list[torch.nn.Module], input_dir: str) -> None:
        for i, model in enumerate(models):
            inner = accelerator.unwrap_model(model)
            state = load_file(str(Path(input_dir) / f"trainable_{i}.safetensors"))
            missing = set(trainable_state(inner)) - set(state)
            if missing:
                raise RuntimeError(
                    f"checkpoint {input_dir} does not match this run's model ({len(missing)} trained weights "
                    f"missing, e.g. {sorted(missing)[0]})"
                )
            inner.load_state_dict(state, strict=False)
        models.clear()

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)


def save_checkpoint(accelerator: Any, run_dir: Path, state: dict[str, Any], keep_last: int) -> Path:
    """Save on every rank (a collective call); rank 0 marks it complete and prunes old ones."""
    folder = checkpoint_path(run_dir, int(state["step"]))
    if accelerator.is_main_process and folder.exists():
        shutil.rmtree(folder)  # a half-written folder of a run killed while saving
    accelerator.wait_for_everyone()
    accelerator.save_state(str(folder))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        atomic_write_text(folder / STATE_FILE, json.dumps(state, indent=2))
        for _, old in complete_checkpoints(run_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return folder
