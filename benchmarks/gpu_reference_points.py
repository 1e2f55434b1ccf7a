"""The VRAM estimate against the studio's own trainer, at the Model & Preset page's reference points.

    python benchmarks/gpu_reference_points.py [--only sd15] [--steps 12] [--json OUT]   # on a CUDA machine
    python benchmarks/gpu_reference_points.py --dry-run                                  # anywhere: tiny model, CPU

For each reference configuration (SD1.5 LoRA at 512 px, fp16, gradient checkpointing;
SDXL LoRA at 1024 px with cached text embeddings and 8-bit AdamW; SD3-medium LoRA at
1024 px without T5), it writes a full-size model with random weights (a single-file
checkpoint for SD1.5 and SDXL, a diffusers folder for SD3), a small dataset at the
native size, and runs `studio-train run` on it as a person would. While the trainer
runs, NVML is read 20 times a second for the trainer's own process: that peak is what
nvidia-smi shows and what the estimate predicts. The trainer's events add torch's
reserved and allocated peaks. Prints a markdown table for docs/benchmarks.md.

`--dry-run` runs the same steps with the tiny SD1.5 model on the CPU (no NVML): it
checks this script, not the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# The reference points: family -> (config sections, the range in GB).
REFERENCES: dict[str, tuple[dict[str, dict[str, Any]], tuple[float, float]]] = {
    "sd15": ({"dataset": {"resolution": 512},
              "training": {"batch_size": 1, "mixed_precision": "fp16", "gradient_checkpointing": True}}, (6, 10)),
    "sdxl": ({"dataset": {"resolution": 1024},
              "training": {"batch_size": 1, "mixed_precision": "fp16", "gradient_checkpointing": True,
                           "cache_text_embeddings": True, "optimizer": "adamw8bit"}}, (8, 12)),
    "sd3": ({"model": {"use_t5": False}, "dataset": {"resolution": 1024},
             "training": {"batch_size": 1, "mixed_precision": "fp16", "gradient_checkpointing": True}}, (10, 16)),
}


class ProcessPeak(threading.Thread):
    """The largest GPU memory NVML reports for one process (and its children), sampled at 20 Hz."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_mb = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        import psutil
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        while not self.stop.wait(0.05):
            try:
                parent = psutil.Process(self.pid)
                pids = {self.pid, *(c.pid for c in parent.children(recursive=True))}
            except psutil.NoSuchProcess:
                continue
            used = 0
            for handle in handles:
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid in pids and proc.usedGpuMemory:
                        used += proc.usedGpuMemory
            self.peak_mb = max(self.peak_mb, used / 2**20)


def make_model(family: str, folder: Path, dry_run: bool) -> Path:
    if dry_run:
        from studio.train.pipelines.tiny import build_tiny_pipeline

        return build_tiny_pipeline("sd15", folder / "tiny-sd15")
    if family == "sd3":
        from studio.train.pipelines.full_size import write_full_size_pipeline

        return write_full_size_pipeline("sd3", folder / "sd3", dtype="fp16", t5=False)
    from studio.train.pipelines.full_size import write_random_checkpoint

    return write_random_checkpoint(folder / f"{family}.safetensors", family)


def run_case(family: str, root: Path, steps: int, dry_run: bool) -> dict[str, Any]:
    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.files.toml_file import save_config
    from studio.core.config.schema import TrainConfig
    from studio.core.dataset.demo_shapes import write_demo_dataset
    from studio.core.estimate.estimate import estimate_vram
    from studio.core.hardware.machine.probe import probe_hardware
    from studio.core.hardware.report import GPUInfo
    from studio.core.runs.events import RunFinished, Step, parse_event

    sections, expected = REFERENCES[family]
    start = time.perf_counter()
    base = make_model(family, root / "models", dry_run)
    resolution = 64 if dry_run else sections["dataset"]["resolution"]
    data = root / "data"
    write_demo_dataset(data, count=8, size=resolution, seed=0)
    made_s = time.perf_counter() - start
    raw: dict[str, Any] = {"model": {"family": "sd15" if dry_run else family, "base": str(base)}}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    raw["dataset"].update(concepts=[{"path": str(data)}], resolution=resolution)
    raw["training"].update(max_steps=steps, learning_rate=1e-4, seed=1)
    if dry_run:
        raw["training"].update(mixed_precision="no", optimizer="adamw")
    raw["output"] = {"dir": str(root / "runs"), "formats": ["diffusers"]}
    config = TrainConfig.model_validate(raw)
    config_path = root / "config.toml"
    save_config(config, config_path)

    report = probe_hardware()
    gpu = report.gpus[0] if report.gpus else GPUInfo(index=0, name="none", total_mb=81920, free_mb=81920)
    estimate = estimate_vram(resolve_paths(config, root), gpu)
    env = dict(os.environ, HF_HUB_OFFLINE="1", STUDIO_CACHE_DIR=str(root / "cache"))
    command = [sys.executable, "-m", "studio.cli", "run", str(config_path)]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = None if dry_run else ProcessPeak(process.pid)
    if sampler is not None:
        sampler.start()
    output, _ = process.communicate(timeout=3600)
    if sampler is not None:
        sampler.stop.set()
        sampler.join()
    run_dirs = sorted((root / "runs").glob("*/events.jsonl"))
    events = [parse_event(line) for line in run_dirs[-1].read_text().splitlines()] if run_dirs else []
    steps_seen = [e for e in events if isinstance(e, Step)]
    finished = next((e for e in events if isinstance(e, RunFinished)), None)
    reserved = max((m.reserved_mb or 0 for e in steps_seen for m in e.memory), default=0.0)
    allocated = max((m.peak_mb or 0 for e in steps_seen for m in e.memory), default=0.0)
    rss = max((m.rss_mb or 0 for e in steps_seen for m in e.memory), default=0.0)
    return {
        "family": family, "expected_gb": expected, "estimate_gb": estimate.total_mb / 1024,
        "training_peak_gb": estimate.training_peak_mb / 1024,
        "nvml_peak_gb": (sampler.peak_mb / 1024) if sampler else None,
        "torch_reserved_gb": reserved / 1024, "torch_peak_allocated_gb": allocated / 1024, "rss_gb": rss / 1024,
        "steps": len(steps_seen), "status": finished.status if finished else f"exit {process.returncode}",
        "gpu": gpu.name, "setup_s": made_s, "output_tail": output[-1500:] if process.returncode else "",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(REFERENCES), default=list(REFERENCES))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--dry-run", action="store_true", help="tiny SD1.5 on the CPU: checks the script only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    families = ["sd15"] if args.dry_run else args.only
    rows = []
    for family in families:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                row = run_case(family, Path(tmp), args.steps, args.dry_run)
            except Exception as exc:  # one failing case is a row, not the end of the measurement
                row = {"family": family, "status": f"{type(exc).__name__}: {exc}"}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print("| reference | issue's range | estimate | nvidia-smi peak (NVML) | torch reserved | torch max allocated "
          "| steps | status |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "estimate_gb" not in row:
            print(f"| {row['family']} | | | | | | | {row['status']} |")
            continue
        nvml = f"{row['nvml_peak_gb']:.2f} GB" if row["nvml_peak_gb"] is not None else "n/a (no GPU)"
        low, high = row["expected_gb"]
        print(f"| {row['family']} | {low}-{high} GB | {row['estimate_gb']:.2f} GB | {nvml} | "
              f"{row['torch_reserved_gb']:.2f} GB | {row['torch_peak_allocated_gb']:.2f} GB | {row['steps']} | "
              f"{row['status']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0 if all(r.get("status") in ("completed",) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
