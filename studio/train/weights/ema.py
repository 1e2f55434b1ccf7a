"""The exponential moving average (EMA) of the trained weights: `training.ema`.

diffusers' `EMAModel` keeps the average: each update, every `training.ema_every` optimizer steps,
moves it towards the weights by 1 - decay: the first update copies the weights, the n-th keeps
n / (n + 9) of the average, until that reaches `training.ema_decay`. With `training.ema_on_cpu` the average lives in CPU
memory and visits the training device only for its update, a piece of at most PIECE_BYTES at a time: the
whole average at once, with the update's temporary of the same size, took twice the trained weights on
the GPU, over the step's own peak for a full fine-tune (the estimate counts none of it there).

A checkpoint holds it as `ema.safetensors` (fp32, exact) and `ema.json` (the update count), so a
resumed run goes on with the very average a straight run has. The finished run writes it beside the
raw weights (outputs.py); samples use it when `training.ema_for_samples` asks.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from studio.core.config.schema import TrainConfig
from studio.core.files import atomic_write_text
from studio.train.errors import TrainError

EMA_WEIGHTS = "ema.safetensors"
EMA_STATE = "ema.json"
PIECE_BYTES = 256 * 2**20  # of the average on the GPU at once while a CPU-kept one is updated


def pieces(tensors: list[torch.Tensor], limit: int) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive runs of `tensors` of at most `limit` bytes each (a larger one alone)."""
    start, size = 0, 0
    for index, tensor in enumerate(tensors):
        nbytes = tensor.numel() * tensor.element_size()
        if index > start and size + nbytes > limit:
            yield start, index
            start, size = index, 0
        size += nbytes
    if start < len(tensors):
        yield start, len(tensors)


class WeightAverage:
    """The EMA of `params` (the trained parameters, in the optimizer's order)."""

    def __init__(self, params: list[torch.nn.Parameter], config: TrainConfig, device: torch.device) -> None:
        from diffusers.training_utils import EMAModel

        training = config.training
        self.params = params
        self.every = training.ema_every
        self.device = device
        self.home = torch.device("cpu") if training.ema_on_cpu else device
        self.average = EMAModel(params, decay=training.ema_decay, foreach=True)
        self.average.to(device=self.home)

    def update(self, step: int) -> None:
        """After optimizer step `step`: one update of the average when it is due."""
        if step % self.every:
            return
        if self.home == self.device:
            self.average.step(self.params)
            return
        average, kept, updates = self.average, self.average.shadow_params, self.average.optimization_step
        try:
            for start, end in pieces(kept, PIECE_BYTES):
                average.shadow_params = [s.to(self.device, non_blocking=True) for s in kept[start:end]]
                average.optimization_step = updates  # every piece at the same decay: one update in all
                average.step(self.params[start:end])
                for home, visited in zip(kept[start:end], average.shadow_params, strict=True):
                    home.copy_(visited)
        finally:
            average.shadow_params = kept

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The averaged weights in the model for the block, the trained ones back (bit for bit) after it."""
        self.average.store(self.params)
        self.average.copy_to(self.params)
        try:
            yield
        finally:
            self.average.restore(self.params)

    def checksum(self) -> float:
        return sum(float(p.detach().double().sum()) for p in self.average.shadow_params)

    # ------------------------------------------------------------ checkpoints

    def save(self, folder: Path) -> None:
        """Write the average into a checkpoint folder (rank 0; before the folder is marked complete)."""
        from safetensors.torch import save_file

        tensors = {f"ema.{i}": p.detach().to("cpu").contiguous() for i, p in enumerate(self.average.shadow_params)}
        save_file(tensors, str(folder / EMA_WEIGHTS))
        atomic_write_text(folder / EMA_STATE, json.dumps({"updates": self.average.optimization_step,
                                                          "decay": self.average.decay, "every": self.every}))

    def load(self, folder: Path) -> None:
        """Restore the average of a checkpoint; a missing or unfit one is a checkpoint error (resume then
        takes an earlier checkpoint)."""
        from safetensors.torch import load_file

        if not (folder / EMA_WEIGHTS).exists() and not (folder / EMA_STATE).exists():
            # A complete checkpoint of a run with the average always holds it: this one's run had none, and
            # training.ema was switched on in its config.toml since (its message called the checkpoint damaged).
            raise TrainError("config", f"the checkpoint {folder} was written without training.ema, which is on now",
                             f"turn training.ema off again in {folder.parent.parent / 'config.toml'} to resume the "
                             "run, or start a new run with it on", path=str(folder))
        try:
            tensors = load_file(str(folder / EMA_WEIGHTS))
            state: dict[str, Any] = json.loads((folder / EMA_STATE).read_text(encoding="utf-8"))
            updates = int(state["updates"])
        except Exception as exc:  # a missing file, a damaged one (SafetensorError), bad JSON
            raise TrainError("checkpoint", f"the EMA of the checkpoint {folder} cannot be read ({exc})",
                             "training.ema needs a checkpoint written with it: delete that checkpoint folder to "
                             "resume from an earlier one, or start a new run", path=str(folder)) from None
        shadow = self.average.shadow_params
        shapes = [tuple(p.shape) for p in shadow]
        found = [tuple(tensors[f"ema.{i}"].shape) if f"ema.{i}" in tensors else None for i in range(len(shadow))]
        if found != shapes or len(tensors) != len(shadow):
            raise TrainError("checkpoint", f"the EMA in the checkpoint {folder} does not match this run's trained "
                             "weights", "resume the run it belongs to, or start a new run", path=str(folder))
        with torch.no_grad():
            for i, param in enumerate(shadow):
                param.copy_(tensors[f"ema.{i}"])
        self.average.optimization_step = updates


def weight_average(config: TrainConfig, trainable: tuple[list[Any], list[Any]],
                   device: torch.device) -> WeightAverage | None:
    """The run's EMA when `training.ema` asks for one."""
    if not config.training.ema:
        return None
    return WeightAverage([p for group in trainable for p in group], config, device)


def for_samples(average: WeightAverage | None, config: TrainConfig) -> contextlib.AbstractContextManager[None]:
    """The weights samples are made with: the average when `training.ema_for_samples` says so."""
    if average is not None and config.training.ema_for_samples:
        return average.applied()
    return contextlib.nullcontext()

