"""The names of the trainer's test hook (studio/train/progress/hold.py): its variable and release files.

Here, free of torch, so that a test driving the window or the CLI can hold a run and let it go.
"""

from __future__ import annotations

import os
from pathlib import Path

HOLD_ENV = "STUDIO_TEST_HOLD_STEPS"


def release_file(run_dir: Path, step: int) -> Path:
    """The file a test writes into the run folder to let a run held at `step` go on."""
    return run_dir / f"release-step-{step}"


def held_steps(environ: dict[str, str] | os._Environ[str] = os.environ) -> frozenset[int]:
    """The steps the trainer waits after, from the environment (none when it is not set)."""
    text = environ.get(HOLD_ENV, "").strip()
    if not text:
        return frozenset()
    try:
        return frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ValueError(f"{HOLD_ENV}={text!r} is not a comma-separated list of step numbers") from exc
