"""The same preset on 1, 2, ... N GPUs of one machine: images/s, scaling efficiency, per-GPU peak memory.

    python benchmarks/gpu_scaling.py [--preset ID ...] [--gpus 1,2,4,8] [--steps 20] [--warmup 3] [--out DIR]
    python benchmarks/gpu_scaling.py --dry-run --preset sd15-dreambooth --gpus 1,2 --out DIR   # CPU ranks

Each count runs the preset through the trainer as the studio launches it (`accelerate launch` with
the run folder's accelerate.yaml): a LoRA data parallel (DDP), a DreamBooth sharded (FSDP) from two
GPUs on. The model is the family's full-size architecture with random weights (written once, as
benchmarks/gpu_acceptance.py does; `--model FAMILY=PATH` gives one), the data demo images with
enough of them for the largest global batch; no samples, no checkpoints. Images/s come from the
step events after `--warmup` steps; the scaling efficiency is images/s at N GPUs over N times
images/s at the smallest count that ran (normally 1); the per-GPU peak is the largest of torch's
peak reserved memory over the ranks (RSS on CPU ranks). A count that fails (out of memory on
one GPU, say) keeps its row with the error. Results: gpu_scaling.md (one markdown table) and
gpu_scaling.json in --out.

`--dry-run` runs the same path with tiny models on CPU ranks (64 px): it checks the script, not
the scaling, which only GPUs can show.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_acceptance import write_model
from process_tree import die_with_parent, ending_children, kill_tree

REPO = Path(__file__).resolve().parents[1]
GB = 1024.0
DEFAULT_PRESETS = ("sdxl-lora", "sdxl-dreambooth-2x24gb")


@dataclass
class Row:
    preset: str
    gpus: int
    strategy: str
    global_batch: int = 0
    images_per_s: float | None = None
    efficiency: float | None = None
    peak_gb: float | None = None
    status: str = "not run"
    seconds: float = 0.0
    message: str = ""


def strategy_for(method: str, gpus: int) -> str:
    """DDP for a LoRA; a DreamBooth sharded once there is more than one GPU."""
    return "fsdp" if method == "dreambooth" and gpus > 1 else "ddp"


def run_config(preset: Any, model: Path, root: Path, gpus: int, steps: int, dry_run: bool) -> Any:
    """The preset over a project of demo images, on `gpus` processes, without samples or checkpoints."""
    from studio.core.config.files.presets import apply_preset
    from studio.core.config.schema import TrainConfig
    from studio.core.estimate.plans.fixes import apply_changes

    project = TrainConfig.model_validate({
        "model": {"family": preset.family, "base": str(model)},
        "dataset": {"concepts": [{"path": str(root / "data")}]},
        "output": {"dir": str(root / "runs"), "name": f"{preset.id}-{gpus}", "formats": ["diffusers"]},
    })
    changes: dict[str, Any] = {"training.max_steps": steps, "training.epochs": None, "sampling.every_n_steps": 0,
                               "output.save_every_n_steps": 0, "launch.num_processes": gpus,
                               "launch.strategy": strategy_for(preset.method, gpus)}
    if changes["launch.strategy"] == "fsdp" and preset.delta.get("training", {}).get("mixed_precision") == "fp16":
        changes["training.mixed_precision"] = "bf16"  # sharded runs have no fp16 loss scaler (the config says so)
    if changes["launch.strategy"] == "fsdp" and preset.delta.get("training", {}).get("optimizer") in (
            "adamw8bit", "adafactor"):
        changes["training.optimizer"] = "adamw"  # their updates cannot take split weights (the config says so)
    if dry_run:  # tiny models on CPU ranks: small images, an optimizer the CPU has, no mixed precision
        changes.update({"dataset.resolution": 64, "dataset.min_bucket": 64, "dataset.max_bucket": 128,
                        "training.optimizer": "adamw", "training.mixed_precision": "no", "launch.cpu": True})
    return apply_changes(apply_preset(project, preset), changes)


def run_one(preset: Any, model: Path, work: Path, gpus: int, args: argparse.Namespace) -> Row:
    from studio.core.config.files.paths import resolve_paths
    from studio.core.dataset.demo_shapes import write_demo_dataset
    from studio.core.runs.launch import prepare_run

    root = work / preset.id
    config = run_config(preset, model, root, gpus, args.warmup + args.steps, args.dry_run)
    row = Row(preset.id, gpus, config.launch.strategy, status="running")
    images = max(8, config.training.effective_batch(max(args.gpus)))
    if not (root / "data").is_dir():
        write_demo_dataset(root / "data", count=images, size=config.dataset.resolution, seed=0)
    plan = prepare_run(resolve_paths(config, root), num_processes=gpus)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", STUDIO_CACHE_DIR=str(work / "cache"))
    if args.dry_run:
        env["OMP_NUM_THREADS"] = "1"
    started = time.monotonic()
    with open(plan.run_dir / "console.log", "ab") as log:
        # In this script's process group (no new session): whatever ends the script ends the ranks.
        process = subprocess.Popen(plan.command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=die_with_parent)
        try:
            code: int | None = process.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            code = None
    row.seconds = round(time.monotonic() - started, 1)
    read_run(row, plan.run_dir, args.warmup, code)
    for heavy in plan.run_dir.glob("output"):
        subprocess.run(["rm", "-rf", str(heavy)], check=False)  # a DreamBooth writes whole models
    return row


def read_run(row: Row, run_dir: Path, warmup: int, code: int | None) -> None:
    """Images/s after the warm-up steps and the per-GPU peak, from the run's events."""
    from studio.core.runs.events import Error, RunFinished, RunStarted, Step, read_events

    events = read_events(run_dir / "events.jsonl") if (run_dir / "events.jsonl").is_file() else []
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    finished = next((e for e in events if isinstance(e, RunFinished)), None)
    steps = [e for e in events if isinstance(e, Step)]
    row.status = "timeout" if code is None else finished.status if finished else f"exit {code}"
    row.message = "; ".join(f"{e.kind}: {e.message}" for e in events if isinstance(e, Error))[:300]
    if started is not None:
        row.global_batch = started.effective_batch
    timed = [s for s in steps if s.step > warmup]
    if started is not None and len(timed) >= 2:
        elapsed = timed[-1].time - timed[0].time
        row.images_per_s = round(started.effective_batch * (len(timed) - 1) / elapsed, 3) if elapsed > 0 else None
    peaks = [m.peak_mb or m.reserved_mb or m.rss_mb or 0.0 for s in steps for m in s.memory]
    row.peak_gb = round(max(peaks) / GB, 2) if peaks and max(peaks) else None


def add_efficiency(rows: list[Row]) -> None:
    """Images/s at N GPUs over N/n times images/s at the smallest count n of the same preset that ran."""
    for preset in dict.fromkeys(r.preset for r in rows):
        ran = [r for r in rows if r.preset == preset and r.images_per_s]
        if not ran:
            continue
        base = min(ran, key=lambda r: r.gpus)
        for row in ran:
            row.efficiency = round(row.images_per_s / (base.images_per_s * row.gpus / base.gpus), 3)  # type: ignore[operator]


def markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    def num(value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    lines = [f"GPU scaling, {meta['date']}: {meta['gpu']}; {meta['steps']} timed steps after {meta['warmup']}"
             + (" (dry run: tiny models on CPU ranks, not a measure of scaling)" if meta["dry_run"] else ""), "",
             "| preset | GPUs | strategy | global batch | images/s | scaling efficiency | per-GPU peak | status |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        efficiency = "—" if r.efficiency is None else f"{r.efficiency * 100:.0f}%"
        lines.append(f"| {r.preset} | {r.gpus} | {r.strategy.upper()} | {r.global_batch or '—'} | "
                     f"{num(r.images_per_s, '.2f')} | {efficiency} | {num(r.peak_gb, '.2f')} GB | {r.status} |")
    return "\n".join(lines) + "\n"


def gpu_description(dry_run: bool) -> tuple[str, int]:
    """(what the machine has, how many GPUs)."""
    if dry_run:
        return "CPU ranks (dry run)", 1024
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise SystemExit("no GPU found: run on a CUDA machine, or pass --dry-run to check the script on the CPU")
    return f"{count} x {torch.cuda.get_device_name(0)}", count


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", action="append", help=f"shipped preset id (default: {', '.join(DEFAULT_PRESETS)})")
    parser.add_argument("--gpus", default="1,2,4,8", help="GPU counts, comma-separated (those the machine has)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps after the warm-up")
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the timing")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--model", action="append", default=[], metavar="FAMILY=PATH", help="use this model")
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu_scaling.json and .md (nothing else)")
    parser.add_argument("--dry-run", action="store_true", help="tiny models on CPU ranks: checks the script")
    args = parser.parse_args(argv)
    try:
        args.gpus = sorted({int(n) for n in args.gpus.split(",")})
    except ValueError:
        parser.error(f"--gpus {args.gpus!r}: give whole numbers separated by commas, e.g. 1,2,4,8")
    args.model = dict(entry.split("=", 1) for entry in args.model)
    if args.dry_run:
        args.steps, args.warmup = min(args.steps, 2), min(args.warmup, 1)
    return args


def write_results(out: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    add_efficiency(rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_scaling.json").write_text(json.dumps({**meta, "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    (out / "gpu_scaling.md").write_text(markdown(rows, meta))


def main(argv: list[str] | None = None) -> int:
    from studio.core.config.files.presets import get_preset

    args = parse_args(argv)
    gpu, available = gpu_description(args.dry_run)
    presets = [get_preset(p) for p in args.preset or DEFAULT_PRESETS]
    counts = [n for n in args.gpus if n <= available]
    if len(counts) < len(args.gpus):
        print(f"this machine has {available} GPUs: counts {[n for n in args.gpus if n > available]} are left out")
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": gpu, "steps": args.steps, "warmup": args.warmup,
            "dry_run": args.dry_run}
    rows: list[Row] = []
    with ending_children(), tempfile.TemporaryDirectory(prefix="gpu-scaling-") as scratch:
        work = Path(scratch)
        models = {f: Path(p) for f, p in args.model.items()}
        for preset in presets:
            if preset.family not in models:
                models[preset.family] = write_model(preset.family, work / "models", tiny=args.dry_run)
            for gpus in counts:
                rows.append(run_one(preset, models[preset.family], work, gpus, args))
                print(f"{preset.id} on {gpus}: {rows[-1].status}, {rows[-1].images_per_s} images/s", flush=True)
                write_results(args.out, rows, meta)  # a call cut short keeps what finished
    write_results(args.out, rows, meta)
    print(markdown(rows, meta))
    return 0 if all(r.status == "completed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
