"""The studio's trainer run in the benchmark's own process, with one optimizer step run through a hook
(profiled, counted): what the GPU speed benchmark and the step-additions count share."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from studio.core.config.files.paths import resolve_paths


def run_studio(config: Any, work: Path, hooked_step: int, around: Callable[[Callable[[], Any]], Any],
               meter: type | None = None) -> tuple[int, Path]:
    """Train `config` in this process (its output into the run's console.log), optimizer step `hooked_step` + 1
    run through `around` (given the step, it returns what the step returns), the step meter replaced by
    `meter` when given; (exit code, run folder)."""
    from studio.core.config.files.toml_file import load_config
    from studio.core.runs.launch import prepare_run
    from studio.train import loop
    from studio.train.entry import train

    plan = prepare_run(resolve_paths(config, work))
    original_meter, original_step = loop.StepMeter, loop.Trainer._train_step

    def step(trainer: Any, *args: Any) -> Any:
        if trainer.step != hooked_step:
            return original_step(trainer, *args)
        return around(lambda: original_step(trainer, *args))

    # The trainer takes SIGTERM and SIGINT for its own stop, and gives them back only when it ends by itself: a
    # case stopped at its timeout (an exception from outside the trainer) left them taken, and the benchmark then
    # let an outer `timeout`'s SIGTERM go unheard instead of ending its children and writing its table.
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    loop.StepMeter = meter or original_meter  # type: ignore[misc]
    loop.Trainer._train_step = step  # type: ignore[method-assign]
    try:
        with open(plan.run_dir / "console.log", "w", encoding="utf-8") as console, \
                contextlib.redirect_stdout(console):
            code = train(load_config(plan.run_dir / "config.toml"), plan.run_dir)
    finally:
        loop.StepMeter = original_meter  # type: ignore[misc]
        loop.Trainer._train_step = original_step  # type: ignore[method-assign]
        for signum, handler in handlers.items():
            if handler is not None:
                with contextlib.suppress(ValueError):  # not the main thread: the trainer took none either
                    signal.signal(signum, handler)
    return code, plan.run_dir
