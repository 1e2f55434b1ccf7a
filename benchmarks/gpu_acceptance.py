"""Every shipped preset on a real GPU: its promise, the studio's estimate and the measured peak.

    python benchmarks/gpu_acceptance.py [--only ID ...] [--steps 16] [--jobs 3] [--out DIR]   # a CUDA machine
    python benchmarks/gpu_acceptance.py --dry-run --only sd15-lora-6gb --out DIR            # anywhere: the script

Each model the presets train is written once with random weights at full size (SD1.5 and SDXL as
single-file checkpoints, SD3-medium without T5 and the families that build their own pipelines as
diffusers folders), by a helper process. The models are written one at a time, in the order the
presets need them, each only when the work folder's free disk holds it (its parameters from
resources/architectures/ at 2 bytes each, with a margin); a model is removed as soon as no preset
waiting or running needs it, which makes room for the next, and a model the disk can never hold
skips its presets with the reason. Models given with --model are used as they are and never removed.
Every preset runs through `studio-train run` (`python -m studio.cli run CONFIG`, as a person would)
on 8 demo images for `--steps` steps with sample images every half of them. While a run lasts, NVML
is read 20 times a second for the run's whole process tree: that peak is what nvidia-smi shows and
what the estimate predicts. Runs are independent processes, so one that crashes or hangs (a per-run
timeout) costs only its own row; up to `--jobs` run side by side when their estimates fit the card
together (NVML counts each process apart; steps are then a little slower).
Runs go lowest promise first (the low-VRAM promises people rely on are measured before the
large ones), each as soon as its model is ready, none starts after `--budget-s` seconds, and a preset that
needs more GPUs than the machine has is skipped with the reason. Results are written after every run, so a
timeout still leaves what finished: `gpu_acceptance.json` and `gpu_acceptance.md` (preset,
promise, estimate, measured peak, error, s/step in steady state, images/s, status), both
under `--out`, with the scratch work (models, runs) in a temporary folder that is removed.
Every child stays in this script's process group (an outer `timeout` ends them with it), and
the script ends them all on exit, on SIGTERM/SIGINT and at a run's timeout.

`--cap` proves the promises instead of trusting a large card: each run's allocator is capped at
its preset's promise minus the CUDA context (`STUDIO_GPU_CAP_MB`, studio/train/memory/cap.py), so
a preset that needs more than its card fails here with out of memory, as it would on that card.

`--dry-run` runs the same path with tiny models on the CPU (64 px, RSS instead of NVML):
it checks the script, not the GPU, so it reports no error against the estimate. Its tiny models need
no disk planning (`--disk-gb` plans the full-size models' writing against a figure instead of the disk),
and a preset's block swap swaps one of their few blocks.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from phase_compare import phase_comparison  # noqa: E402
from process_tree import die_with_parent, ending_children, kill_tree  # noqa: E402

PROMPT = "a red square on a white background"
GB = 1024.0
# What a CUDA process holds outside torch's allocator (context, cuBLAS/cuDNN workspaces): about 500-600 MB
# on recent drivers; a card's promise is proven with the allocator capped at the rest.
CONTEXT_MB = 640.0
CAP_ENV = "STUDIO_GPU_CAP_MB"  # studio/train/memory/cap.py


class TreePeak(threading.Thread):
    """The largest memory of a process and its children, sampled at 20 Hz: NVML on a GPU, RSS on the CPU."""

    def __init__(self, pid: int, gpu: bool) -> None:
        super().__init__(daemon=True)
        self.pid, self.gpu = pid, gpu
        self.peak_mb = 0.0
        # The whole card over what it held when the run began: for when NVML names no process of ours
        # (a container with its own process ids) and this run is the only one.
        self.device_peak_mb = 0.0
        self.device_base_mb: float | None = None
        self.error = ""  # the first NVML error met: that sample is lost, the sampling goes on
        self.halt = threading.Event()

    def run(self) -> None:
        import psutil

        handles = self._handles() if self.gpu else []
        if self.gpu and not handles:
            return
        while not self.halt.wait(0.05):
            try:
                tree = [psutil.Process(self.pid), *psutil.Process(self.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            self.peak_mb = max(self.peak_mb, self._sample_gpu(handles, tree) if self.gpu else self._rss_mb(tree))

    def _handles(self) -> list[Any]:
        import pynvml

        try:
            pynvml.nvmlInit()
            return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except pynvml.NVMLError as exc:
            self._note(exc)
            return []

    def _sample_gpu(self, handles: list[Any], tree: list[Any]) -> float:
        import pynvml

        try:
            return self._gpu_mb(handles, tree)
        except pynvml.NVMLError as exc:
            self._note(exc)
            return 0.0

    def _note(self, exc: Exception) -> None:
        self.error = self.error or f"NVML error: {exc}"

    def _gpu_mb(self, handles: list[Any], tree: list[Any]) -> float:
        import pynvml

        pids, used, device = {p.pid for p in tree}, 0, 0
        for handle in handles:
            device += pynvml.nvmlDeviceGetMemoryInfo(handle).used
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid in pids and proc.usedGpuMemory:
                    used += proc.usedGpuMemory
        if self.device_base_mb is None:
            self.device_base_mb = device / 2**20
        self.device_peak_mb = max(self.device_peak_mb, device / 2**20 - self.device_base_mb)
        return used / 2**20

    @staticmethod
    def _rss_mb(tree: list[Any]) -> float:
        import psutil

        sizes = []
        for proc in tree:
            try:
                sizes.append(proc.memory_info().rss)
            except psutil.NoSuchProcess:
                continue
        return max(sizes, default=0) / 2**20  # the trainer's own; the launchers are small


def model_key(preset: Any) -> str:
    """Which model a preset trains: its family's, or for a family of several sizes the size its id names."""
    from studio.core.families import family

    spec = family(preset.family)
    return spec.architecture(preset.id) if spec.size_of is not None else str(preset.family)


def write_model(family: str, folder: Path, tiny: bool) -> Path:
    """A model of `family` (a model_key) with random weights: tiny, or full size (the single-file checkpoints
    load fastest; the families that build their own pipelines write a folder)."""
    from studio.train.pipelines.full_size import write_acceptance_model

    return write_acceptance_model(family, folder, tiny)


@dataclass
class Row:
    preset: str
    family: str
    promise_gb: float
    estimate_gb: float | None = None
    measured_gb: float | None = None
    error_pct: float | None = None
    s_per_step: float | None = None
    images_per_s: float | None = None
    status: str = "not run"
    steps: int = 0
    torch_reserved_gb: float | None = None
    seconds: float = 0.0
    started_s: float | None = None  # when the run started, in seconds after the script began
    cap_gb: float | None = None  # the allocator's cap (--cap): the promise less the CUDA context
    message: str = ""
    log_tail: str = ""
    estimate_parts: dict[str, float] = field(default_factory=dict)
    # Seconds of each phase of the run (run_finished's phases: loading, text encoding, fp8 conversion,
    # caching, steps, each sampling...), to hold a low-VRAM preset's phases against its 24 GB preset's.
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class Job:
    row: Row
    root: Path
    config_path: Path
    every: int
    process: subprocess.Popen[bytes]
    sampler: TreePeak
    started: float
    log: Any


def run_config(preset: Any, model: Path, root: Path, steps: int, dry_run: bool) -> tuple[Any, Any]:
    """(the config as run, the full-size config the estimate reads): the preset over a project of 8 demo images."""
    from studio.core.config.files.presets import apply_preset
    from studio.core.config.schema import TrainConfig
    from studio.core.dataset.demo_shapes import write_demo_dataset
    from studio.core.estimate.plans.fixes import apply_changes

    project = TrainConfig.model_validate({
        "model": {"family": preset.family, "base": str(model)},
        "dataset": {"concepts": [{"path": str(root / "data")}]},
        "sampling": {"prompts": [PROMPT]},
        "output": {"dir": str(root / "runs"), "name": preset.id, "formats": ["diffusers"]},
    })
    every = max(1, steps // 2)
    full = apply_changes(apply_preset(project, preset), {
        "training.max_steps": steps, "training.epochs": None, "sampling.every_n_steps": every})
    run = full
    if dry_run:  # tiny models on the CPU: small images, an optimizer the CPU has, one of a few blocks swapped
        run = apply_changes(full, {"dataset.resolution": 64, "dataset.min_bucket": 64, "dataset.max_bucket": 128,
                                   "sampling.size": 64, "sampling.steps": 2, "training.optimizer": "adamw",
                                   "model.blocks_to_swap": min(full.model.blocks_to_swap, 1)})
    write_demo_dataset(root / "data", count=8, size=run.dataset.resolution, seed=0)
    return run, full


TRAINER = [sys.executable, "-m", "studio.cli", "run"]  # `studio-train run CONFIG`, as a person runs it


def cap_of(preset: Any, context_mb: float) -> float:
    """The allocator cap that proves `preset`'s promise: its card's memory less the CUDA context."""
    return preset.min_vram_gb * GB - context_mb


def start_job(preset: Any, model: Path, work: Path, steps: int, gpu: Any, dry_run: bool,
              trainer: list[str] = TRAINER, cap_mb: float | None = None) -> Job:
    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.files.toml_file import save_config
    from studio.core.estimate.estimate import estimate_vram
    from studio.core.estimate.plans.fixes import apply_changes
    from studio.core.models.known import default_base

    root = work / preset.id
    root.mkdir(parents=True, exist_ok=True)
    config, full = run_config(preset, model, root, steps, dry_run)
    if dry_run:  # the full-size preset's estimate: a tiny model would be estimated at its own size
        from studio.core.config.files.presets import preset_size
        from studio.core.families import family

        size = preset_size(preset)
        base = family(preset.family).size_bases[size] if size else default_base(preset.family)
        full = apply_changes(full, {"model.base": base})
    estimate = estimate_vram(resolve_paths(full, root), gpu)
    row = Row(preset.id, preset.family, preset.min_vram_gb, round(estimate.total_gb, 2), status="running",
              estimate_parts={p.key: round(p.mb / GB, 3) for p in estimate.parts})
    config_path = root / "config.toml"
    save_config(config, config_path)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", STUDIO_CACHE_DIR=str(work / "cache"))
    if cap_mb is not None:
        env[CAP_ENV] = str(round(cap_mb))
        row.cap_gb = round(cap_mb / GB, 2)
    log = open(root / "cli.log", "wb")  # noqa: SIM115 - closed when the job is collected
    # No new session: the run stays in this script's process group, so whatever ends the script ends it.
    process = subprocess.Popen([*trainer, str(config_path)], cwd=REPO, env=env,
                               stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    sampler = TreePeak(process.pid, gpu=not dry_run)
    sampler.start()
    return Job(row, root, config_path, config.sampling.every_n_steps, process, sampler, time.monotonic(), log)


def read_run(job: Job, timed_out: bool) -> Row:
    """The row of a finished (or killed) run: status, steady s/step, images/s, memory."""
    from studio.core.runs.events import Error, RunFinished, RunStarted, Step, read_events

    row = job.row
    row.seconds = round(time.monotonic() - job.started, 1)
    events_files = sorted((job.root / "runs").glob("*/events.jsonl"))
    events = read_events(events_files[-1]) if events_files else []
    steps = [e for e in events if isinstance(e, Step)]
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    finished = next((e for e in events if isinstance(e, RunFinished)), None)
    errors = [e for e in events if isinstance(e, Error)]
    row.steps = len(steps)
    row.phases = {p.name: p.seconds for p in finished.phases} if finished else {}
    row.status = "timeout" if timed_out else finished.status if finished else f"exit {job.process.returncode}"
    row.message = "; ".join(f"{e.kind}: {e.message}" for e in errors)[:500] or (finished.message if finished else "")
    # Steady state: from the third step on, leaving out the steps right after sample images.
    gaps = [b.time - a.time for a, b in itertools.pairwise(steps) if a.step >= 2 and a.step % job.every]
    if gaps:
        row.s_per_step = round(statistics.median(gaps), 3)
        row.images_per_s = round((started.effective_batch if started else 1) / row.s_per_step, 2)
    reserved = [m.reserved_mb for e in steps for m in e.memory if m.reserved_mb]
    row.torch_reserved_gb = round(max(reserved) / GB, 2) if reserved else None
    if row.status != "completed":
        row.log_tail = (job.root / "cli.log").read_bytes()[-2000:].decode("utf-8", "replace")
    return row


def finish_job(job: Job, timed_out: bool, dry_run: bool, alone: bool) -> Row:
    if timed_out:
        kill_tree(job.process.pid)
    job.process.wait()
    job.sampler.halt.set()
    job.sampler.join()
    job.log.close()
    row = read_run(job, timed_out)
    peak = job.sampler.peak_mb
    if not dry_run and not peak and alone:
        peak = job.sampler.device_peak_mb  # NVML names no process of ours (a container): the card's figure
    row.measured_gb = round(peak / GB, 2) if peak else None
    if job.sampler.error:
        row.message = "; ".join(filter(None, [row.message, f"{job.sampler.error} (the sampling went on)"]))
    if row.measured_gb and row.estimate_gb and not dry_run:
        row.error_pct = round((row.estimate_gb / row.measured_gb - 1) * 100, 1)
    for heavy in job.root.glob("runs/*/output"):
        shutil.rmtree(heavy, ignore_errors=True)  # DreamBooth writes whole models: keep the disk free
    return row


def markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    from studio.core.config.files.presets import get_preset

    def num(value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    capped = meta.get("context_mb") is not None
    lines = [f"GPU acceptance, {meta['date']}: {meta['gpu']}; {meta['steps']} steps, samples every "
             f"{meta['every']} steps, up to {meta['jobs']} runs side by side" + (" (dry run: tiny models on the CPU, "
             "peak RSS, not comparable with the estimate)" if meta["dry_run"] else "")
             + (f"; each run's allocator capped at its promise less {meta['context_mb']:.0f} MB of CUDA context"
                if capped else ""), "",
             "| preset | promise | " + ("cap | " if capped else "") + "estimate | measured peak | error | s/step | "
             "images/s | status |",
             "|---|---|---|---|---|---|---|---|" + ("---|" if capped else "")]
    for r in rows:
        cap = f"{num(r.cap_gb, '.2f')} GB | " if capped else ""
        lines.append(f"| {r.preset} | {r.promise_gb:g} GB | {cap}{num(r.estimate_gb, '.2f')} GB | "
                     f"{num(r.measured_gb, '.2f')} GB | {num(r.error_pct, '+.1f')}% | {num(r.s_per_step, '.2f')} | "
                     f"{num(r.images_per_s, '.2f')} | {r.status} |")
    return "\n".join(lines) + "\n" + phase_comparison(rows, lambda preset_id: model_key(get_preset(preset_id)))


def write_results(out: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_acceptance.json").write_text(json.dumps({**meta, "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    (out / "gpu_acceptance.md").write_text(markdown(rows, meta))


def the_gpus(dry_run: bool) -> list[Any]:
    from studio.core.hardware.machine.probe import probe_hardware
    from studio.core.hardware.report import GPUInfo

    report = None if dry_run else probe_hardware()
    if report is not None and report.gpus:
        return list(report.gpus)
    if not dry_run:
        raise SystemExit("no GPU found: run on a CUDA machine, or pass --dry-run to check the script on the CPU")
    return [GPUInfo(index=0, name="none (dry run)", total_mb=143_771, free_mb=143_771)]


def error_line(exc: BaseException, chars: int) -> str:
    """An error in a table cell: its class and the first `chars` characters of its first line."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:chars]}"


BYTES_WRITTEN = 2  # fp16 or bf16: every full-size model the GPU scripts write
T5_ROLE = "text_encoder_t5"  # SD3's T5 encoder, which the written models leave out
# A model is written only when the disk holds it with a margin: 5% over its estimate and 2 GB for the runs'
# caches, samples and logs.
DISK_OVER = 1.05
DISK_SPARE_GB = 2.0


def written_gb(architecture: str) -> float:
    """About the disk a full-size random-weight model of a counted architecture (resources/architectures/
    <name>.json) takes as the GPU scripts write it: 2 bytes a parameter, SD3's T5 left out."""
    from studio.core.estimate.memory_data import load_architecture

    parts = load_architecture(architecture)["components"].values()
    return sum(int(p["params"]) for p in parts if p["role"] != T5_ROLE) * BYTES_WRITTEN / 2**30


def preset_model_gb(preset: Any) -> float:
    """About the disk the full-size model a preset trains takes (`model_key`'s model)."""
    from studio.core.families import family

    return written_gb(family(preset.family).architecture(preset.id))


class Disk:
    """The work folder's free disk, for models written one at a time: read before each write, or, with a figure
    given (`--disk-gb`), that figure less the models written and not yet removed."""

    def __init__(self, folder: Path, start_gb: float | None) -> None:
        self.folder, self.start_gb = folder, start_gb
        self.held: dict[str, float] = {}  # the models written (or being written) and still on disk, in GB

    @classmethod
    def planned(cls, folder: Path, disk_gb: float | None, dry_run: bool) -> Disk:
        """`--disk-gb` when given; else the folder's disk, except in a dry run, whose tiny models need no plan."""
        return cls(folder, disk_gb if disk_gb is not None else math.inf if dry_run else None)

    def free_gb(self) -> float:
        if self.start_gb is None:
            return shutil.disk_usage(self.folder).free / 2**30
        return self.start_gb - sum(self.held.values())

    @staticmethod
    def needed_gb(model_gb: float) -> float:
        return model_gb * DISK_OVER + DISK_SPARE_GB

    def fits(self, model_gb: float) -> bool:
        return self.needed_gb(model_gb) <= self.free_gb()

    def no_room(self, model_gb: float) -> str:
        return f"its model needs about {self.needed_gb(model_gb):.0f} GB of disk, {self.free_gb():.0f} GB free"


def writer_command(dry_run: bool) -> list[str]:
    """The command that writes one model, less its KEY DIR: this script as a helper process."""
    return [sys.executable, str(Path(__file__).resolve()), *(["--dry-run"] if dry_run else []), "--write-model"]


@dataclass
class Writing:
    key: str
    process: subprocess.Popen[bytes]
    log: Any  # its open log file


class Models:
    """The presets' models. Given ones are used as they are and never removed; the others are written one at a
    time, in the order the presets need them, each when the disk can hold it, and removed as soon as no preset
    waiting or running needs it, which makes room for the next."""

    def __init__(self, order: list[str], sizes: dict[str, float], folder: Path, given: dict[str, Path],
                 disk: Disk, writer: list[str]) -> None:
        self.sizes, self.folder, self.disk, self.writer = sizes, folder, disk, writer
        self.given = {key: given[key] for key in order if key in given}
        self.written: dict[str, Path] = {}
        self.failed: dict[str, str] = {}  # why a model cannot be had: the status of its presets
        self.queue = [key for key in order if key not in given]
        self.writing: Writing | None = None

    def state(self, key: str) -> Path | str | None:
        """The model's path once there; why it cannot be had; None while it waits or is being written."""
        return self.given.get(key) or self.written.get(key) or self.failed.get(key)

    def writing_gb(self) -> float:
        """The model being written, which its writer may hold on the GPU while it draws the weights."""
        return self.sizes[self.writing.key] if self.writing else 0.0

    def update(self, needed: set[str]) -> None:
        """Collect a finished writer, remove what no preset in `needed` uses, and start the next writer."""
        self._collect()
        self._remove(needed)
        self._start_next()

    def stop(self) -> None:
        """End the writer at work, if any, and remove its part-written model."""
        if self.writing is not None:
            kill_tree(self.writing.process.pid)
            self.writing.process.wait()
            self.writing.log.close()
            self._delete(self.writing.key)
            self.writing = None

    def _collect(self) -> None:
        writing = self.writing
        if writing is None or writing.process.poll() is None:
            return
        self.writing = None
        writing.log.close()
        marker = self.folder / writing.key / f"{writing.key}.path"
        if writing.process.returncode == 0 and marker.is_file():
            self.written[writing.key] = Path(marker.read_text().strip())
            print(f"model {writing.key} written", file=sys.stderr, flush=True)
            return
        tail = Path(writing.log.name).read_text(errors="replace").strip().splitlines()
        self.failed[writing.key] = (f"writing the model failed (exit {writing.process.returncode})"
                                    + (f": {tail[-1][:300]}" if tail else ""))
        self._delete(writing.key)

    def _remove(self, needed: set[str]) -> None:
        for key in [k for k in self.written if k not in needed]:
            del self.written[key]
            self._delete(key)
            print(f"model {key} removed: no preset left needs it", file=sys.stderr, flush=True)
        if self.writing is not None and self.writing.key not in needed:  # its presets ran out of time
            self.stop()
        self.queue = [key for key in self.queue if key in needed]

    def _start_next(self) -> None:
        while self.writing is None and self.queue:
            key = self.queue[0]
            if self.disk.fits(self.sizes[key]):
                self._start(self.queue.pop(0))
            elif self.disk.held:  # a model written before is still in use: its removal makes room
                return
            else:  # nothing of ours is left to remove: the disk will never hold it
                self.failed[self.queue.pop(0)] = f"skipped: {self.disk.no_room(self.sizes[key])}"

    def _start(self, key: str) -> None:
        folder = self.folder / key
        folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder.parent / f"model-{key}.log", "wb")  # noqa: SIM115 - closed when collected
        free = self.disk.free_gb()
        print(f"writing the model {key} (about {self.sizes[key]:.0f} GB"
              + (f", {free:.0f} GB free)" if math.isfinite(free) else ")"), file=sys.stderr, flush=True)
        process = subprocess.Popen([*self.writer, key, str(folder)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                   preexec_fn=die_with_parent)
        self.writing = Writing(key, process, log)
        self.disk.held[key] = self.sizes[key]

    def _delete(self, key: str) -> None:
        shutil.rmtree(self.folder / key, ignore_errors=True)
        self.disk.held.pop(key, None)


def the_models(args: argparse.Namespace, presets: list[Any], work: Path) -> Models:
    """The presets' models, in the order the presets need them (lowest promise first)."""
    order = list(dict.fromkeys(model_key(p) for p in presets))
    given = dict(args.model)
    sizes = {model_key(p): preset_model_gb(p) for p in presets if model_key(p) not in given}
    writer = args.writer or writer_command(args.dry_run)
    return Models(order, sizes, work / "models", given, Disk.planned(work, args.disk_gb, args.dry_run), writer)


def pick_presets(only: list[str] | None) -> list[Any]:
    from studio.core.config.files.presets import list_presets

    presets = list_presets(include_user=False)
    known = {p.id for p in presets}
    unknown = sorted(set(only or []) - known)
    if unknown:
        raise SystemExit(f"unknown presets {unknown}; shipped: {sorted(known)}")
    chosen = [p for p in presets if not only or p.id in only]
    return sorted(chosen, key=lambda p: (p.min_vram_gb * p.gpus, p.gpus, p.id))  # lowest promise first


def schedule(args: argparse.Namespace, presets: list[Any], work: Path, gpu: Any, meta: dict[str, Any],
             gpu_count: int = 1) -> list[Row]:
    """Start runs as their models are ready, up to --jobs at once while their estimates fit the card together,
    within the time budget; collect each as it ends and write the results after every one."""
    rows = {p.id: Row(p.id, p.family, p.min_vram_gb) for p in presets}
    for preset in [p for p in presets if p.gpus > gpu_count]:
        rows[preset.id].status = f"skipped: needs {preset.gpus} GPUs, this machine has {gpu_count}"
    presets = [p for p in presets if p.gpus <= gpu_count]
    write_results(args.out, list(rows.values()), meta)
    models = the_models(args, presets, work)
    pending, jobs = list(presets), args.jobs
    running: list[Job] = []
    began = time.monotonic()
    try:
        _run_all(args, pending, running, rows, models, work, gpu, meta, began, jobs)
    except SystemExit:  # ended from outside (SIGTERM, SIGINT): the table says what was cut short
        for job in running:
            kill_tree(job.process.pid)
            rows[job.row.preset] = finish_job(job, True, args.dry_run, alone=len(running) == 1)
            rows[job.row.preset].status = "stopped: the script was ended"
        for preset in pending:
            rows[preset.id].status = "not started: the script was ended"
        write_results(args.out, list(rows.values()), meta)
        raise
    finally:
        models.stop()
    write_results(args.out, list(rows.values()), meta)
    return list(rows.values())


def _run_all(args: argparse.Namespace, pending: list[Any], running: list[Job], rows: dict[str, Row],
             models: Models, work: Path, gpu: Any, meta: dict[str, Any], began: float, jobs: int) -> None:
    keys = {p.id: model_key(p) for p in pending}
    while pending or running:
        for job in [j for j in running if j.process.poll() is not None
                    or time.monotonic() - j.started > args.run_timeout]:
            running.remove(job)
            rows[job.row.preset] = finish_job(job, job.process.poll() is None, args.dry_run, alone=jobs == 1)
            # A run that trained steps held GPU memory: if NVML gave it none, NVML does not name our processes here,
            # so measure one run at a time from now on. A run that ended before its first step (refused, or failed
            # while loading) may never have touched the GPU, and tells nothing about NVML.
            if (not args.dry_run and not job.sampler.peak_mb and job.sampler.device_peak_mb and jobs > 1
                    and rows[job.row.preset].steps):
                jobs = 1
                rows[job.row.preset].status += " (measure again with --jobs 1)"
            write_results(args.out, list(rows.values()), meta)
        models.update({keys[p.id] for p in pending} | {keys[j.row.preset] for j in running})
        for preset in list(pending):
            if time.monotonic() - began > args.budget_s:
                pending.remove(preset)
                rows[preset.id].status = "skipped: out of time"
                continue
            ready = models.state(keys[preset.id])
            if ready is None:
                continue
            if isinstance(ready, str):
                pending.remove(preset)
                rows[preset.id].status = ready
                continue
            room = (gpu.total_mb * 0.85 - sum((j.row.estimate_gb or 0) * GB for j in running)
                    - models.writing_gb() * GB)
            if len(running) >= jobs or (bool(running) and _estimate_mb(preset) > room):
                break
            pending.remove(preset)
            at = round(time.monotonic() - began, 1)
            cap = cap_of(preset, args.context_mb) if args.cap else None
            try:
                job = start_job(preset, ready, work, args.steps, gpu, args.dry_run, args.trainer or TRAINER, cap)
            except Exception as exc:  # one preset that cannot start costs its row, not the call
                rows[preset.id].status = f"failed to start: {error_line(exc, 300)}"
                write_results(args.out, list(rows.values()), meta)
                continue
            job.row.started_s = at
            running.append(job)
            write_results(args.out, _with(rows, running), meta)  # the table says what runs now
            print(f"started {preset.id}", file=sys.stderr, flush=True)
        time.sleep(0.2)


def _with(rows: dict[str, Row], running: list[Job]) -> list[Row]:
    """Every row, the running ones as they stand."""
    now = {job.row.preset: job.row for job in running}
    return [now.get(name, row) for name, row in rows.items()]


def _estimate_mb(preset: Any) -> float:
    from studio.core.estimate.plans.preset_estimate import estimate_preset

    return estimate_preset(preset).estimate.total_mb


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="preset ids (default: every shipped preset)")
    parser.add_argument("--steps", type=int, default=16, help="optimizer steps per run (samples every half)")
    parser.add_argument("--jobs", type=int, default=3, help="runs side by side when they fit the card together")
    parser.add_argument("--run-timeout", type=float, default=150, help="seconds before a run is killed")
    parser.add_argument("--budget-s", type=float, default=330,
                        help="no run starts after this many seconds (with the timeout: done within 8 minutes)")
    parser.add_argument("--dry-run", action="store_true", help="tiny models on the CPU: checks the script only")
    parser.add_argument("--cap", action="store_true",
                        help="cap each run's GPU allocator at its promise less the CUDA context (the proof)")
    parser.add_argument("--context-mb", type=float, default=CONTEXT_MB,
                        help=f"the CUDA context and library workspaces outside the allocator (default {CONTEXT_MB})")
    parser.add_argument("--model", action="append", default=[], type=_family_path, metavar="FAMILY=PATH",
                        help="use this model for a family (flux2-klein-4b: a family of several sizes with its "
                             "size) instead of writing one")
    parser.add_argument("--out", type=Path, default=None, help="folder for the JSON and markdown (nothing else)")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs on this machine (default: as probed; dry run 1)")
    parser.add_argument("--disk-gb", type=float, default=None,
                        help="plan the models' writing as if the work folder had this many GB free at the start "
                             "(default: its disk, read before each write; a dry run's tiny models plan none)")
    parser.add_argument("--trainer", type=shlex.split, default=None, help=argparse.SUPPRESS)  # tests: a stand-in
    parser.add_argument("--writer", type=shlex.split, default=None, help=argparse.SUPPRESS)  # tests: given KEY DIR
    parser.add_argument("--write-model", nargs=2, metavar=("FAMILY", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.out is None and not args.write_model:
        parser.error("--out DIR is required: the folder for gpu_acceptance.json and gpu_acceptance.md")
    return args


def _family_path(text: str) -> tuple[str, Path]:
    """FAMILY=PATH, FAMILY a model the presets train: a family's name, or a family of several sizes with the
    size (`flux2-klein-4b`), as `model_key` names them."""
    from studio.core.config.files.presets import list_presets

    keys = sorted({model_key(p) for p in list_presets(include_user=False)})
    family, _, path = text.partition("=")
    if family not in keys or not path:
        raise argparse.ArgumentTypeError(f"expected FAMILY=PATH with FAMILY one of {', '.join(keys)}, not {text!r}")
    return family, Path(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.write_model:  # the helper process that writes one family's model
        family, folder = args.write_model[0], Path(args.write_model[1])
        path = write_model(family, folder, tiny=args.dry_run)
        (folder / f"{family}.path").write_text(str(path))
        return 0
    presets = pick_presets(args.only)
    gpus = the_gpus(args.dry_run)
    gpu, gpu_count = gpus[0], args.gpus or len(gpus)
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": gpu.name, "driver": gpu.driver, "cuda": gpu.cuda,
            "steps": args.steps, "every": max(1, args.steps // 2), "jobs": 1 if args.dry_run else args.jobs,
            "dry_run": args.dry_run, "python": sys.version.split()[0], "gpus": gpu_count, "budget_s": args.budget_s,
            "context_mb": args.context_mb if args.cap else None}
    if args.dry_run:
        args.jobs = 1  # the CPU runs one tiny training at a time
    with ending_children(), tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as tmp:
        work = Path(tmp)
        (work / "models").mkdir()
        rows = schedule(args, presets, work, gpu, meta, gpu_count)
    print(markdown(rows, meta))
    return 0 if all(r.status == "completed" or r.status.startswith("skipped: needs") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
