"""The run_started event: what a run trains, on which devices, from which step."""

from __future__ import annotations

from typing import Any

from studio import __version__
from studio.core.config.files.toml_file import config_to_data
from studio.core.runs.events import RunStarted
from studio.train.runtime import all_devices


def announce(trainer: Any) -> None:
    """Emitted once the set-up is done, before the first step of the leg."""
    acc, training = trainer.accelerator, trainer.config.training
    devices = [str(d) for d in all_devices(acc)]
    config = config_to_data(trainer.config)
    # Said even when it is the default: older studios trained on the mean, newer ones on a sample.
    config.setdefault("dataset", {})["latents"] = trainer.config.dataset.latents
    trainer.reporter.emit(RunStarted(
        config=config, world_size=acc.num_processes, total_steps=trainer.total,
        devices=devices, effective_batch=training.effective_batch(acc.num_processes),
        num_images=sum(i.repeats for i in trainer.items), resumed_from_step=trainer.step,
        run_dir=str(trainer.run_dir), studio_version=__version__, sharding=trainer.sharding.report(),
    ))
    trainer.reporter.phase("training", trainer.step, trainer.total)
