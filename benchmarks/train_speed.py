"""Speed of a fixed tiny-model LoRA job, started exactly as the studio starts it (accelerate launch).

Reports, per family (tiny SD1.5, SDXL and SD3 pipelines) and variant (with and
without latent/text caching): steps per second, seconds from process start to the
first training step, seconds from the run's last line of output to the process's exit,
and the trainer's peak RSS. Medians of --repeats runs.
Usage: python benchmarks/train_speed.py [--repeats 3] [--steps 30] [--families sd15 sdxl sd3]
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
from studio.core.runs.launch import prepare_run

VARIANTS = {
    "no cache": {},
    "latent + text cache": {"cache_latents": True, "cache_text_embeddings": True},
}


FAMILIES = ("sd15", "sdxl", "sd3")


def job(root: Path, family: str, steps: int, cache: dict[str, bool]) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family=family, base=str(root / f"tiny-{family}")),  # type: ignore[arg-type]
        method=MethodSection(kind="lora", rank=8),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(root / "shapes"))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=4, max_steps=steps, learning_rate=1e-3, seed=1, **cache),
        output=OutputSection(dir=str(root / "runs"), formats=["diffusers"]),
    )


def measure(root: Path, family: str, steps: int, cache: dict[str, bool]) -> dict[str, float]:
    plan = prepare_run(job(root, family, steps, cache), root)
    # One torch thread: the tiny models are fastest so, and the figures do not depend on the core count.
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    start = time.time()
    process = subprocess.Popen(plan.command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    output, last_output = [], start
    for line in iter(process.stdout.readline, b""):
        output.append(line.decode(errors="replace"))
        last_output = time.time()
    code = process.wait()
    ended = time.time()
    if code != 0:
        raise SystemExit(f"the benchmark run failed:\n{''.join(output)[-3000:]}")
    events = [json.loads(line) for line in (plan.run_dir / "events.jsonl").read_text().splitlines()]
    step_events = [e for e in events if e["type"] == "step"]
    first, last = step_events[0], step_events[-1]
    return {
        "first_step_s": first["time"] - start,
        "steps_per_s": (last["step"] - first["step"]) / max(1e-9, last["time"] - first["time"]),
        "peak_rss_mb": max(m["rss_mb"] for e in step_events for m in e["memory"]),
        "exit_s": ended - last_output,
        "total_s": ended - start,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--families", nargs="*", choices=FAMILIES, default=list(FAMILIES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_demo_dataset(root / "shapes", count=16, size=64, seed=0)
        rows = []
        for family in args.families:
            subprocess.run([sys.executable, "-m", "studio.cli", "tiny", family, str(root / f"tiny-{family}")],
                           check=True, capture_output=True)
            for name, cache in VARIANTS.items():
                runs = [measure(root, family, args.steps, cache) for _ in range(args.repeats)]
                rows.append((f"{family}, {name}", {k: statistics.median(r[k] for r in runs) for k in runs[0]}))
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{args.steps} steps, batch 4, 64 px, LoRA rank 8; median of {args.repeats}\n")
    print("| family, variant | steps/s | process start to first step (s) | last output to exit (s) "
          "| peak RSS (MB) | whole run (s) |")
    print("|---|---|---|---|---|---|")
    for name, m in rows:
        print(f"| {name} | {m['steps_per_s']:.1f} | {m['first_step_s']:.1f} | {m['exit_s']:.2f} "
              f"| {m['peak_rss_mb']:.0f} | {m['total_s']:.1f} |")
    slow = [name for name, m in rows if m["first_step_s"] >= 10]
    if slow:
        print(f"\nFAIL: first step took 10 s or more in: {', '.join(slow)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
