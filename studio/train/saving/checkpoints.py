"""Checkpoints: accelerate's state (optimizer, RNG, scaler), the scheduler's, and only the trained weights.

A checkpoint folder is complete once `training_state.json` is in it; that file is
written last, so a run killed while saving resumes from the previous checkpoint.

Every file of a checkpoint is loaded as data only: the trained weights are safetensors,
the scheduler is JSON, and what accelerate pickles (optimizer, RNG, scaler) is read with
`weights_only=True`, so a checkpoint changed by someone else cannot run code on resume;
a file that is more than weights is refused with a message.
"""

from __future__ import annotations

import json
import pickle
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from studio.core.files import atomic_write_text
from studio.core.runs.folders import CHECKPOINTS_DIR
from studio.train.errors import TrainError, write_failure

STATE_FILE = "training_state.json"
SCHEDULER_FILE = "scheduler.json"
# Checkpoints written before the scheduler had its own file keep its state here (accelerate's name).
LEGACY_SCHEDULER_FILE = "custom_checkpoint_0.pkl"
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
    """Save only the parameters being trained (a LoRA checkpoint stays small), as safetensors."""
    from safetensors.torch import save_file

    def save_hook(models: list[torch.nn.Module], weights: list[Any], output_dir: str) -> None:
        if accelerator.is_main_process:
            for i, model in enumerate(models):
                state = {k: v.cpu() for k, v in trainable_state(accelerator.unwrap_model(model)).items()}
                save_file(state, str(Path(output_dir) / f"trainable_{i}.safetensors"))
        weights.clear()

    accelerator.register_save_state_pre_hook(save_hook)


def save_checkpoint(accelerator: Any, run_dir: Path, state: dict[str, Any], keep_last: int, scheduler: Any,
                    extra: Callable[[Path], None] | None = None) -> Path:
    """Save on every rank (a collective call); rank 0 marks it complete and prunes old ones.

    `extra` writes what else the run keeps (the EMA) into the folder on rank 0, before it is marked complete.

    A full disk (or a file over the disk's file-size limit) ends the run with a disk_full error and leaves no half-written folder behind.
    """
    folder = checkpoint_path(run_dir, int(state["step"]))
    try:
        if accelerator.is_main_process and folder.exists():
            shutil.rmtree(folder)  # a half-written folder of a run killed while saving
        accelerator.wait_for_everyone()
        accelerator.save_state(str(folder))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            atomic_write_text(folder / SCHEDULER_FILE, json.dumps(scheduler.state_dict()))
            if extra is not None:
                extra(folder)
            atomic_write_text(folder / STATE_FILE, json.dumps(state, indent=2))
            for _, old in complete_checkpoints(run_dir)[:-keep_last]:
                shutil.rmtree(old, ignore_errors=True)
    except Exception as exc:  # torch says RuntimeError for a full disk, safetensors SafetensorError
        needed = checkpoint_bytes(run_dir, accelerator)
        failure = write_failure(exc, folder.parent, needed, f"the checkpoint of step {state['step']}")
        if accelerator.is_main_process:
            shutil.rmtree(folder, ignore_errors=True)  # no half checkpoint; its space is free for the error event
        if failure is None:
            raise
        raise failure from None
    accelerator.wait_for_everyone()
    return folder


def checkpoint_bytes(run_dir: Path, accelerator: Any) -> int:
    """About what one checkpoint takes: the newest complete one, else the trained weights and
    the optimizer's two moments in fp32."""
    found = latest_checkpoint(run_dir)
    if found is not None:
        return sum(p.stat().st_size for p in found[1].iterdir() if p.is_file())
    params = sum(p.numel() for model in getattr(accelerator, "_models", [])
                 for p in model.parameters() if p.requires_grad)
    return params * 4 * 3 + 2**20


def load_checkpoint(accelerator: Any, folder: Path, scheduler: Any) -> dict[str, Any]:
    """Restore what save_checkpoint wrote into the prepared models, optimizer, scheduler, scaler and RNGs.

    Returns the training state (step, epoch...). Raises TrainError (kind "checkpoint") for a
    file that is not plain data or does not fit this run.
    """
    from safetensors.torch import load_file

    for i, model in enumerate(accelerator._models):
        inner = accelerator.unwrap_model(model)
        try:
            state = load_file(str(folder / f"trainable_{i}.safetensors"))
        except Exception as exc:  # safetensors raises its own SafetensorError (no common base) for a damaged file
            raise TrainError("checkpoint", f"trainable_{i}.safetensors in the checkpoint {folder} cannot be read "
                             f"({exc})", "delete that checkpoint folder to resume from an earlier one",
                             path=str(folder)) from None
        missing = set(trainable_state(inner)) - set(state)
        if missing:
            raise TrainError("checkpoint", f"checkpoint {folder} does not match this run's model ({len(missing)} "
                             f"trained weights missing, e.g. {sorted(missing)[0]})",
                             "resume the run it belongs to, or start a new run", path=str(folder))
        inner.load_state_dict(state, strict=False)
    for i, optimizer in enumerate(accelerator._optimizers):
        saved = _weights_only(folder / ("optimizer.bin" if i == 0 else f"optimizer_{i}.bin"))
        try:
            optimizer.load_state_dict(saved)
        except ValueError as exc:  # other parameter groups or counts: the run trained other weights
            raise TrainError(
                "config", f"the checkpoint {folder} was written while other weights were trained: its optimizer "
                f"state does not fit this run's ({exc})",
                f"set method.train_text_encoder (and the method's other settings) back as they were when the run "
                f"started, in {folder.parent.parent / 'config.toml'}, and resume again; or start a new run",
                path=str(folder)) from None
    if (folder / SCHEDULER_FILE).is_file():
        scheduler.load_state_dict(json.loads((folder / SCHEDULER_FILE).read_text(encoding="utf-8")))
    elif (folder / LEGACY_SCHEDULER_FILE).is_file():
        scheduler.load_state_dict(_weights_only(folder / LEGACY_SCHEDULER_FILE))
    if accelerator.scaler is not None and (folder / "scaler.pt").is_file():
        accelerator.scaler.load_state_dict(_weights_only(folder / "scaler.pt"))
    rng = folder / f"random_states_{accelerator.process_index}.pkl"
    if rng.is_file():
        _restore_random_states(_weights_only(rng))
    return read_state(folder)


def _restore_random_states(states: dict[str, Any]) -> None:
    random.setstate(states["random_state"])
    np.random.set_state(states["numpy_random_seed"])
    torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        # One state per GPU the saving process saw: a run resumed with fewer GPUs visible (other launch.gpu_ids,
        # another machine) restores those it has instead of failing on the first one it lacks.
        for index, state in enumerate(states["torch_cuda_manual_seed"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state, index)


def _weights_only(path: Path) -> Any:
    """A file accelerate pickled, read as data only (tensors, numbers, numpy arrays); code in it never runs."""
    from accelerate.utils.other import load

    try:
        return load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise TrainError(
            "checkpoint",
            f"{path.name} in the checkpoint {path.parent} holds more than weights (objects whose loading could "
            f"run code: {first}); it was not loaded",
            "the checkpoint was changed after the studio wrote it, or comes from elsewhere: delete that checkpoint "
            "folder to resume from an earlier one, or start a new run", path=str(path),
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError) as exc:
        raise TrainError("checkpoint", f"{path} cannot be read ({exc.__class__.__name__}: {exc})",
                         "delete that checkpoint folder to resume from an earlier one, or start a new run",
                         path=str(path)) from None
