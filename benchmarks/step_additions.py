"""What the studio's training step dispatches beyond the bare denoiser step, op by op (on the CPU).

The speed issue's eager step took 1.19x the bare step on an H200. Every aten op the studio's step
dispatches is a kernel launch (or more) on the GPU, so the ops it adds to the bare step (the same
denoiser, LoRA and fused AdamW on the same shapes, benchmarks/bare_step.py) are where the host time
goes: noise and timestep draws, the loss, copies, the EMA, gradient clipping, the scheduler. This
script counts both on a family's tiny model (batch 2, 64 px, fp32, latents and text cached) with
torch's dispatch mode and prints the ops whose counts differ, most added first.

Run: `python benchmarks/step_additions.py [FAMILY ...]` (default sd15 sdxl; a few seconds each).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_step import bare_step
from gpu_train_speed import Case, Settings, _tiny_model, studio_config
from studio_run import run_studio

STEP = 3  # the optimizer step counted (after the first, which sets up state)


def _counting() -> tuple[Counter[str], Any]:
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: Counter[str] = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            counts[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    return counts, Count


def bare_ops(family: str, batch: int, work: Path) -> Counter[str]:
    step = bare_step(family, batch, 64, "cpu", True, lambda name: _tiny_model(name, work))
    for _ in range(STEP - 1):
        step.run()
    counts, mode = _counting()
    with mode():
        step.run()
    return counts


def studio_ops(family: str, batch: int, work: Path, models: Path) -> Counter[str]:
    settings = Settings(True, 1, STEP, work)
    config = studio_config(Case(family, batch, "studio"), settings, _tiny_model(family, models), compiled="off")
    counts, mode = _counting()

    def counted(run: Any) -> Any:
        with mode():
            return run()

    code, run_dir = run_studio(config, work, STEP - 1, counted)
    if code != 0:
        raise SystemExit(f"the studio's run of {family} failed; see {run_dir / 'console.log'}")
    return counts


def table(family: str, bare: Counter[str], studio: Counter[str], rows: int) -> str:
    diff = {op: studio[op] - bare[op] for op in set(bare) | set(studio) if studio[op] != bare[op]}
    lines = [f"{family}: bare step {sum(bare.values())} ops, studio step {sum(studio.values())} ops "
             f"({sum(studio.values()) - sum(bare.values()):+d})", "| op | bare | studio | added |", "|---|---|---|---|"]
    for op, added in sorted(diff.items(), key=lambda item: -item[1])[:rows]:
        lines.append(f"| {op} | {bare[op]} | {studio[op]} | {added:+d} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="*", default=["sd15", "sdxl"])
    parser.add_argument("--rows", type=int, default=15, help="ops shown per family")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="step-additions-") as scratch:
        work = Path(scratch)  # the tiny models and the studio's runs, removed at the end
        for family in args.families:
            bare = bare_ops(family, 2, work)
            print(table(family, bare, studio_ops(family, 2, work / family, work), args.rows) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
