"""A test hook: the trainer waits after a chosen step until it is told to go on.

A test that stops, kills or watches a real run must not race it: on a fast machine the tiny
model's forty steps end before a click lands, on a loaded one they take minutes. Instead the
test sets `STUDIO_TEST_HOLD_STEPS` (say "2" or "2,10") in the trainer's environment. After
each of those steps (its step event written and flushed, its samples and checkpoints done)
every rank waits until the run folder holds a STOP file (Stop pressed), a SIGTERM/SIGINT
arrives, or the test writes `release-step-N` into the run folder (studio/core/runs/scheduling/hold.py).
The ranks then agree on the stop at that very step, so a held run stops exactly where it was held.

Nothing sets the variable outside tests; a run without it never waits. A held run that is
never released goes on after HOLD_CEILING_S with a warning, so a forgotten hold cannot hang
a trainer for good.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from studio.core.runs.scheduling.hold import HOLD_ENV, held_steps, release_file

HOLD_CEILING_S = 900.0
POLL_S = 0.02


class StepHold:
    """Waits after the held steps of STUDIO_TEST_HOLD_STEPS (none outside tests)."""

    def __init__(self, run_dir: Path, stop: Any, accelerator: Any) -> None:
        self.run_dir = run_dir
        self.stop = stop
        self.accelerator = accelerator
        self.steps = held_steps()

    def due(self, step: int) -> bool:
        return step in self.steps

    def wait(self, step: int, warn: Any) -> bool:
        """Wait at `step` until released or asked to stop; True when every rank is to stop now."""
        release = release_file(self.run_dir, step)
        deadline = time.monotonic() + HOLD_CEILING_S
        while not (self.stop.local() or release.exists()):
            if time.monotonic() > deadline:
                warn(f"held at step {step} for {HOLD_CEILING_S:.0f} s by {HOLD_ENV} and never released; going on")
                break
            time.sleep(POLL_S)
        wanted = self.stop.local()
        if int(self.accelerator.num_processes) == 1:
            return bool(wanted)
        import torch

        flag = torch.tensor([1.0 if wanted else 0.0], device=self.accelerator.device)
        return bool(self.accelerator.gather(flag).max().item() > 0)
