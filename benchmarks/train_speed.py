"""Speed of a fixed tiny-model LoRA job, started exactly as a person starts it (`studio-train run`).

Reports, per family (tiny SD1.5, SDXL and SD3 pipelines) and variant (with and
without latent/text caching): steps per second, seconds from process start to the
first training step, seconds from the trainer's last line ("run completed") to the end
of its process (the command prints the outputs only once the launcher has exited), and
the trainer's peak RSS. Medians of --repeats runs; one torch thread.

With --against DIR (another checkout of the studio, e.g. the previous release), every
run of this checkout is paired with one of DIR's, in turn, and the table adds the median
of the paired ratios (this / other): on a busy machine the ratios hold where single
figures drift.
Usage: python benchmarks/train_speed.py [--repeats 3] [--steps 30] [--families sd15 sdxl sd3] [--against DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from studio.core.config.files.toml_file import save_config
from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    ModelSection,
    OutputSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.dataset.demo_shapes import write_demo_dataset

VARIANTS = {
    "no cache": {},
    "latent + text cache": {"cache_latents": True, "cache_text_embeddings": True},
}
FAMILIES = ("sd15", "sdxl", "sd3")
THIS = str(Path(__file__).resolve().parents[1])
FIGURES = ("steps_per_s", "first_step_s", "exit_s", "peak_rss_mb", "total_s")


def job(root: Path, family: str, steps: int, cache: dict[str, bool]) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family=family, base=str(root / f"tiny-{family}")),  # type: ignore[arg-type]
        method=MethodSection(kind="lora", rank=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(root / "shapes"))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=4, max_steps=steps, learning_rate=1e-3, seed=1, **cache),
        output=OutputSection(dir=str(root / "runs"), formats=["diffusers"]),
    )


def measure(config_file: Path, tree: str) -> dict[str, float]:
    """One `studio-train run` of `config_file` with the studio of checkout `tree`."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONPATH=tree)
    start = time.time()
    # `python -m` looks in the working folder first: run from the checkout being measured.
    process = subprocess.Popen([sys.executable, "-m", "studio.cli", "run", str(config_file)], env=env, cwd=tree,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    lines: list[tuple[float, str]] = []
    for raw in iter(process.stdout.readline, b""):
        lines.append((time.time(), raw.decode(errors="replace").rstrip()))
    code = process.wait()
    ended = time.time()
    text = "\n".join(line for _, line in lines)
    if code != 0:
        raise SystemExit(f"the benchmark run failed ({tree}):\n{text[-3000:]}")
    run_dir = Path(next(line for _, line in lines if line.startswith("run folder: ")).split(": ", 1)[1])
    completed = next(t for t, line in lines if "run completed at step" in line)
    written = next(t for t, line in lines if line.startswith("written: "))
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    step_events = [e for e in events if e["type"] == "step"]
    first, last = step_events[0], step_events[-1]
    return {
        "first_step_s": first["time"] - start,
        "steps_per_s": (last["step"] - first["step"]) / max(1e-9, last["time"] - first["time"]),
        "peak_rss_mb": max(m["rss_mb"] for e in step_events for m in e["memory"]),
        "exit_s": written - completed,
        "total_s": ended - start,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--families", nargs="*", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--against", metavar="DIR", help="another checkout of the studio to pair every run with")
    parser.add_argument("--variants", nargs="*", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    trees = [THIS, *([str(Path(args.against).resolve())] if args.against else [])]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_demo_dataset(root / "shapes", count=16, size=64, seed=0)
        rows = []
        for family in args.families:
            subprocess.run([sys.executable, "-m", "studio.cli", "tiny", family, str(root / f"tiny-{family}")],
                           check=True, capture_output=True)
            for name, cache in ((n, VARIANTS[n]) for n in args.variants):
                config_file = root / f"{family}-{len(rows)}.toml"
                save_config(job(root, family, args.steps, cache), config_file)
                runs = [[measure(config_file, tree) for tree in trees] for _ in range(args.repeats)]
                rows.append((f"{family}, {name}", runs))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{args.steps} steps, batch 4, 64 px, LoRA rank 8; median of {args.repeats}"
          + (f"; paired with {trees[1]}" if args.against else "") + "\n")
    titles = ["steps/s", "process start to first step (s)", "trainer done to exit (s)", "peak RSS (MB)",
              "whole run (s)"]
    if args.against:
        titles = [f"{title}: this, other, this/other" for title in titles]
    print("| family, variant | " + " | ".join(titles) + " |")
    print("|---|---|---|---|---|---|")
    for name, runs in rows:
        cells = []
        for key in FIGURES:
            this = statistics.median(r[0][key] for r in runs)
            if not args.against:
                cells.append(f"{this:.2f}")
                continue
            other = statistics.median(r[1][key] for r in runs)
            ratio = statistics.median(r[0][key] / max(r[1][key], 1e-9) for r in runs)
            cells.append(f"{this:.2f}, {other:.2f}, {ratio:.2f}x")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
