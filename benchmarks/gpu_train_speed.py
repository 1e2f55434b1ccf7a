"""Training speed on one GPU: the bare denoiser step against the studio's trainer, eager and compiled.

For each family at its native size (FLUX.2 [klein] 4B, Z-Image, SDXL and SD3-medium at 1024 px,
SD1.5 at 512 px, and Qwen-Image at 1024 px when named; full-size architectures with random
weights, nothing downloaded) and batch 1 and 4 (and 16 for SD1.5; a family whose batch 4 the studio's
estimate does not fit in 85% of the card, at the largest batch that does: [klein] 4B at 2 and Z-Image at 1
on an 80 GB card):

- bare: the denoiser's training step alone (bf16 autocast, frozen bf16 weights, LoRA rank 16,
  fused AdamW), on random latents and text conditioning of the real shapes (bare_step.py);
- studio: the studio's trainer (`studio.train.entry.train`, in this process) on a full-size
  random-weight pipeline written to disk, LoRA rank 16, bf16, latents and text embeddings
  cached, no gradient checkpointing, samples off;
- studio compiled: the same with training.compile = "blocks";
- studio compiled graphs: training.compile = "graphs" (the whole denoiser, each image size's step
  replayed as a CUDA graph: what batch 1, host-bound when eager, gains).

Reported: s/step and images/s in steady state (after warm-up steps, between two points where
the trainer has waited for the GPU), MFU (images/s x the family's own forward TFLOP per image,
resources/architectures/flops.json, x 2 / the GPU's bf16 peak, resources/gpu_peaks.toml), peak
VRAM of the training steps, compile time (the `compiling` phase), and what one more step after
the timed ones costs the host under torch.profiler (step_profile.py): aten ops dispatched and, on
the GPU, kernels launched (results.json adds the launch calls and the host's waits). The cases
run in order of importance (each family's batch 4 eager, bare then the studio; the compiled batch
4; batch 1; SD1.5 at 16; a compiled run in a new process on the warm compile cache) and stop
starting new ones when --budget-s seconds have passed; a case that runs past --case-timeout-s is stopped
and noted. A family's model is written before its first case's timeout starts, under --write-timeout-s of
its own, into a staging folder renamed when complete (a write cut short leaves nothing that looks whole,
and is not tried again); when the disk cannot hold the next model (its size and a margin, as the
acceptance plans them; --disk-gb plans against a figure), the models of the families whose cases are done
are removed. The table (table.md) and the figures (results.json) are rewritten in --out after
every case, so a device call cut short still returns what finished; models, data and runs go
to a scratch folder that is removed at the end (unless --work names one). Children (the
compiler's workers, the second-process case) stay in this script's process group and are
ended when it leaves (normally, SIGTERM or SIGINT).

On a CUDA machine:  python benchmarks/gpu_train_speed.py --out DIR [--budget-s 420] [--only sdxl sd3]
On the CPU:         python benchmarks/gpu_train_speed.py --dry-run --out DIR [--only sd15] [--paths bare studio]
(the dry run uses the tiny pipelines at 64 px, batch 1 and 2, fp32, a few steps: the same
code paths, none of the figures; its compiled cases build C++ kernels, minutes on two cores).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_step import bare_step
from gpu_acceptance import Disk, error_line, written_gb
from process_tree import die_with_parent, ending_children, kill_tree
from speed_table import number, write_results
from step_profile import StepProfile, profile_step
from studio_run import run_studio

from studio.core.estimate.throughput import forward_tflop, gpu_peak, mfu, step_multiplier
from studio.core.families import family as declared
from studio.core.models.known import default_base

# Measured by default, the families whose figures are missing first; Qwen-Image (a 20B transformer: a
# 56 GB pipeline on disk for the trainer's cases) only when named with --only.
FAMILIES = ("flux2-klein", "zimage", "sdxl", "sd3", "sd15")
OPTIONAL_FAMILIES = ("qwen-image",)
GRAPHS = "studio compiled graphs"
PATHS = ("bare", "studio", "studio compiled", GRAPHS)
# training.compile of each trainer path
COMPILE = {"studio": "off", "studio compiled": "blocks", GRAPHS: "graphs", "studio compiled, 2nd process": "blocks"}
# One per-step addition at a time, against the plain "studio" path (run only when --paths names them, after
# the rest): what each costs a step, as the issue asks to find the eager step's distance from the bare one.
ABLATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "studio +ema": {"training": {"ema": True}},
    "studio +validation": {"training": {"validation_every": 4}, "dataset": {"validation_fraction": 0.25}},
    "studio uncached": {"training": {"cache_latents": False, "cache_text_embeddings": False}},
}


@dataclass(frozen=True)
class Case:
    family: str
    batch: int
    path: str  # bare | studio | studio compiled | studio compiled, 2nd process


@dataclass
class Result:
    case: Case
    resolution: int
    s_per_step: float | None = None
    images_per_s: float | None = None
    mfu: float | None = None
    peak_gib: float | None = None
    compile_s: float | None = None
    ops_per_step: int | None = None  # aten ops one steady step dispatches on the host
    kernels_per_step: int | None = None  # kernels it launches on the GPU (None on the CPU)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    dry_run: bool
    warmup: int
    steps: int
    work: Path
    case_timeout_s: float = 240.0

    @property
    def device(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    def resolution(self, family: str) -> int:
        return 64 if self.dry_run else declared(family).native_resolution


SECOND = "studio compiled, 2nd process"


# Of the card's memory, what a case's estimate may take (the estimate is within -7%..+12.5% of measured peaks).
CARD_SHARE = 0.85


def fitting_batch(family: str, wanted: int, card_gib: float) -> int:
    """The largest of `wanted`, its halves and 1 whose run (LoRA rank 16, bf16, caches on, no checkpointing) the
    studio's estimate fits in CARD_SHARE of the card: [klein] 4B at batch 4 needs about 85 GB at 1024 px and
    Z-Image about 161 GB, so on an 80 GB card the case would only measure an out-of-memory error."""
    from studio.core.config.schema import (
        ConceptSection,
        DatasetSection,
        MethodSection,
        ModelSection,
        TrainConfig,
        TrainingSection,
    )
    from studio.core.estimate.estimate import estimate_vram
    from studio.core.hardware.report import GPUInfo

    gpu = GPUInfo(index=0, name="this GPU", total_mb=int(card_gib * 1024), free_mb=int(card_gib * 1024))
    side = declared(family).native_resolution
    batch = wanted
    while batch > 1:
        config = TrainConfig(
            model=ModelSection(family=family, base="random"),  # type: ignore[arg-type]
            method=MethodSection(kind="lora", rank=16, alpha=16),
            dataset=DatasetSection(concepts=[ConceptSection(path=".")], resolution=side, buckets=False),
            training=TrainingSection(batch_size=batch, mixed_precision="bf16", cache_latents=True,
                                     cache_text_embeddings=True, gradient_checkpointing=False))
        if estimate_vram(config, gpu).total_gb <= CARD_SHARE * card_gib:
            break
        batch //= 2
    return batch


def cases(families: list[str], dry_run: bool, paths: list[str], card_gib: float | None = None) -> list[Case]:
    """Every case, most important first: each family's batch 4 eager (bare, then the studio), the compiled
    batch 4, then batch 1 (where a host-bound step shows), SD1.5 at 16, and the warm-cache run. With the card's
    memory known (`card_gib`), a family whose batch 4 would not fit it is measured at the largest batch that does."""
    big, small, huge = (2, 1, 2) if dry_run else (4, 1, 16)
    chosen = [p for p in PATHS if p in paths]
    eager = [p for p in chosen if "compiled" not in p]
    compiled = [p for p in chosen if "compiled" in p]
    large = {f: fitting_batch(f, big, card_gib) if card_gib and not dry_run else big for f in families}
    ordered = [Case(f, large[f], p) for f in families for p in eager]
    ordered += [Case(f, large[f], p) for f in families for p in compiled]
    ordered += [Case(f, small, p) for f in families for p in chosen if large[f] != small]
    if "sd15" in families and not dry_run:
        ordered += [Case("sd15", huge, p) for p in chosen]
    if SECOND in paths:
        first = "sdxl" if "sdxl" in families else families[0]
        ordered.append(Case(first, large[first], SECOND))
    ordered += [Case(f, size, p) for size in (big, small) for f in families for p in ABLATIONS if p in paths
                if size in (large[f], small)]
    return ordered


# ------------------------------------------------------------------ the bare step


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure_bare(case: Case, settings: Settings) -> Result:
    device, side = settings.device, settings.resolution(case.family)
    result = Result(case, side)
    step = bare_step(case.family, case.batch, side, device, settings.dry_run,
                     lambda family: _tiny_model(family, settings.work))
    start = time.perf_counter()
    for index in range(settings.warmup + settings.steps):
        if index == settings.warmup:
            _sync(device)
            _reset_peak(device)
            start = time.perf_counter()
        step.run()
    _sync(device)
    result.s_per_step = (time.perf_counter() - start) / settings.steps
    result.peak_gib = _peak_gib(device)
    try:
        _note_profile(result, profile_step(step.run, device))
    except Exception as exc:  # a profiler that cannot start must not cost the case its timing
        result.note = f"no profile: {exc.__class__.__name__}: {str(exc)[:80]}"
    del step
    return result


def _note_profile(result: Result, profile: StepProfile) -> None:
    result.ops_per_step, result.kernels_per_step = profile.ops, profile.kernels
    result.extra.update(launches_per_step=profile.launches, host_waits_per_step=profile.host_waits)


# ------------------------------------------------------------------ the studio's trainer

def _complete(folder: Path) -> bool:
    return (folder / "model_index.json").is_file()


def _write_staged(folder: Path, write: Callable[[Path], Any]) -> None:
    """`write(staging)` into a staging folder beside `folder`, renamed to it once complete: a write cut short
    leaves nothing that looks whole, and its staging folder is removed."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        write(staging)
        with contextlib.suppress(OSError):  # another process of the same call wrote it first
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _model_folder(family: str, work: Path, dry_run: bool) -> Path:
    return work / "models" / (f"tiny-{family}" if dry_run else f"{family}-bf16")


def _tiny_model(family: str, work: Path) -> Path:
    """The family's tiny pipeline in the work folder, built once for the whole call and removed with it."""
    folder = _model_folder(family, work, dry_run=True)
    if not _complete(folder):
        from studio.train.pipelines.tiny import build_tiny_pipeline

        _write_staged(folder, lambda staging: build_tiny_pipeline(family, staging))
    return folder


def _full_model(family: str, work: Path) -> Path:
    """The family's full-size random-weight pipeline (bf16, drawn on the GPU), written once for the whole call."""
    folder = _model_folder(family, work, dry_run=False)
    if not _complete(folder):
        from studio.train.pipelines.full_size import write_full_size_pipeline

        began = time.perf_counter()
        _write_staged(folder, lambda staging: write_full_size_pipeline(family, staging, dtype="bf16", t5=False,
                                                                      device="cuda"))
        print(f"[model] {family}: full-size random-weight pipeline written in {time.perf_counter() - began:.0f} s",
              flush=True)
    return folder


def _model(family: str, settings: Settings) -> Path:
    """The family's model for the trainer: written before its case (`FamilyModels.prepare`), or now for a case
    run on its own (the compiled case in a second process)."""
    return _tiny_model(family, settings.work) if settings.dry_run else _full_model(family, settings.work)


def needs_model(case: Case, dry_run: bool) -> bool:
    """Whether `case` reads its family's model from disk (the trainer's cases; in a dry run the bare step too)."""
    return dry_run or case.path != "bare"


class FamilyModels:
    """Each family's model, written before its case's timeout starts, under a limit of its own; a family whose
    write failed or ran out of time is not written again. While the disk cannot hold the next model (the
    acceptance's rule: its size and a margin), the models of the families whose cases are done are removed."""

    def __init__(self, settings: Settings, disk: Disk, limit_s: float) -> None:
        self.settings, self.disk, self.limit_s = settings, disk, limit_s
        self.failed: dict[str, str] = {}

    def prepare(self, case: Case, later: list[Case]) -> str:
        """Write `case`'s model if it needs one that is not there yet: '' when ready, else why the case cannot
        run (the note of its row). `later`: the cases after it."""
        family = case.family
        if not needs_model(case, self.settings.dry_run) or family in self.disk.held:
            return ""
        if family in self.failed:
            return self.failed[family]
        size = written_gb(declared(family).architecture(default_base(family)))
        if not _complete(_model_folder(family, self.settings.work, self.settings.dry_run)):
            self._make_room(size, later)
            if not self.disk.fits(size):
                return f"not run: {self.disk.no_room(size)}"
            note = self._write(family)
            if note:
                self.failed[family] = note
                return note
        self.disk.held[family] = size
        return ""

    def _make_room(self, size: float, later: list[Case]) -> None:
        needed = {c.family for c in later if needs_model(c, self.settings.dry_run)}
        for family in [f for f in self.disk.held if f not in needed]:
            if self.disk.fits(size):
                return
            shutil.rmtree(_model_folder(family, self.settings.work, self.settings.dry_run), ignore_errors=True)
            del self.disk.held[family]
            print(f"[model] {family}: removed (its cases are done, and the disk is short)", flush=True)

    def _write(self, family: str) -> str:
        try:
            with _time_limit(self.limit_s):
                _model(family, self.settings)
        except CaseTimeout:
            return f"timeout writing its model (over {self.limit_s:g} s)"
        except Exception as exc:  # the family's cases say why, the others run
            return f"failed writing its model: {error_line(exc, 120)}"
        return ""


def _dataset(settings: Settings, side: int, count: int) -> Path:
    from studio.core.dataset.demo_shapes import write_demo_dataset

    folder = settings.work / "data" / f"shapes-{side}-{count}"
    if not folder.is_dir():
        write_demo_dataset(folder, count=count, size=side, seed=0)
    return folder


def studio_config(case: Case, settings: Settings, base: Path, compiled: str) -> Any:
    """The trainer config of `case`, with training.compile = `compiled` (off, blocks, graphs)."""
    from studio.core.config.schema import (
        ConceptSection,
        DatasetSection,
        MethodSection,
        ModelSection,
        OutputSection,
        TrainConfig,
        TrainingSection,
    )

    side = settings.resolution(case.family)
    return TrainConfig(
        model=ModelSection(family=case.family, base=str(base)),  # type: ignore[arg-type]
        method=MethodSection(kind="lora", rank=16, alpha=16),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(_dataset(settings, side, max(8, case.batch))))],
                               resolution=side, buckets=False),
        training=TrainingSection(
            # the timed steps, then one more run under the profiler
            batch_size=case.batch, max_steps=settings.warmup + settings.steps + 1, learning_rate=1e-4, seed=1,
            mixed_precision="no" if settings.dry_run else "bf16", cache_latents=True, cache_text_embeddings=True,
            compile=compiled,
        ),
        output=OutputSection(dir=str(settings.work / "runs"), name=f"{case.family}-b{case.batch}",
                             formats=["diffusers"]),
    )


# Synced points of the trainer's step meter: (step, seconds) right after each read-back from the GPU.
_POINTS: list[tuple[int, float]] = []


def _timed_meter(warmup: int, last_timed: int) -> type:
    """The trainer's StepMeter, also reading back at the last warm-up step and the last timed one, noting when
    each read-back returned (the GPU had finished every step up to it), and measuring the steps' peak memory."""
    from studio.train.progress.step_meter import Report, StepMeter

    class TimedMeter(StepMeter):
        def start(self) -> None:
            _reset_peak(str(self.accelerator.device.type))  # the steps' peak, not the caching's
            _POINTS.clear()
            super().start()

        def due(self, step: int, forced: bool) -> bool:
            return super().due(step, forced or step in (warmup, last_timed))

        def flush(self, stop_wanted: bool) -> Report:
            last = self.pending[-1].step if self.pending else None
            report = super().flush(stop_wanted)
            if last is not None:
                _POINTS.append((last, time.perf_counter()))
            return report

    return TimedMeter


def measure_studio(case: Case, settings: Settings) -> Result:
    from studio.core.runs.events import Phase, read_events

    side = settings.resolution(case.family)
    result = Result(case, side)
    config = studio_config(case, settings, _model(case.family, settings), COMPILE.get(case.path, "off"))
    for section, values in ABLATIONS.get(case.path, {}).items():
        for key, value in values.items():
            setattr(getattr(config, section), key, value)
    last_timed = settings.warmup + settings.steps
    profiles: list[StepProfile] = []

    def profiled(run: Callable[[], Any]) -> Any:
        returned: list[Any] = []
        try:
            profiles.append(profile_step(lambda: returned.append(run()), settings.device))
        except Exception as exc:  # a profiler that cannot start must not cost the case its timing
            result.note = f"no profile: {exc.__class__.__name__}: {str(exc)[:80]}"
        return returned[0] if returned else run()

    code, run_dir = run_studio(config, settings.work, last_timed, profiled, _timed_meter(settings.warmup, last_timed))
    if code != 0:
        tail = (run_dir / "console.log").read_text(encoding="utf-8")[-400:]
        result.note = f"failed (exit {code}): {tail.strip().splitlines()[-1] if tail.strip() else ''}"
        return result
    steady = [(s, t) for s, t in _POINTS if settings.warmup <= s <= last_timed]
    if len(steady) >= 2 and steady[-1][0] > steady[0][0]:
        (s0, t0), (s1, t1) = steady[0], steady[-1]
        result.s_per_step = (t1 - t0) / (s1 - s0)
    compiling = [e for e in read_events(run_dir / "events.jsonl")
                 if isinstance(e, Phase) and e.name == "compiling" and e.elapsed_s is not None]
    result.compile_s = sum(e.elapsed_s or 0.0 for e in compiling) if compiling else None
    result.peak_gib = _peak_gib(settings.device)
    if profiles:
        _note_profile(result, profiles[0])
    return result


def measure_second_process(case: Case, settings: Settings) -> Result:
    """The compiled case again in a new process: the compile cache on disk is warm, memory is not."""
    command = [sys.executable, __file__, "--single", f"{case.family}:{case.batch}", "--work", str(settings.work),
               "--steps", str(settings.steps), "--warmup", str(settings.warmup)]
    if settings.dry_run:
        command.append("--dry-run")
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
                             preexec_fn=die_with_parent)
    try:
        stdout, stderr = child.communicate(timeout=settings.case_timeout_s)
    except subprocess.TimeoutExpired:
        kill_tree(child.pid)
        child.communicate()
        return Result(case, settings.resolution(case.family), note=f"timeout after {settings.case_timeout_s:g} s")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        result = Result(case, settings.resolution(case.family))
        result.note = f"failed (exit {child.returncode}): {(stderr or stdout).strip()[-200:]}"
        return result
    data = json.loads(lines[-1])
    data.pop("case")
    return Result(case, **data)


# ------------------------------------------------------------------ the table


def _reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device: str) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def _finish(result: Result, settings: Settings) -> Result:
    if result.s_per_step:
        result.images_per_s = result.case.batch / result.s_per_step
        tflop = forward_tflop(result.case.family, result.resolution, result.resolution) * step_multiplier(False, False)
        peak = gpu_peak(torch.cuda.get_device_name()) if settings.device == "cuda" else None
        result.mfu = mfu(result.images_per_s * tflop, peak, "bf16")
    return result


class CaseTimeout(BaseException):
    """A case ran past --case-timeout-s (a BaseException: the trainer's own handlers must not keep it)."""


IMPORT_DEFER_S = 0.05
# Whether the running case's alarm went off: the trainer reports a stop it did not expect as a failed run
# (exit 1, "run failed at step 0") instead of letting CaseTimeout through, which is still a timeout.
_ALARM_FIRED = [False]


# Code that runs as part of an `import` statement: Python's import machinery, and PySide's import hook, which
# reads each imported module's source (inspect.getsource) after the module ran; stopped there, the source file
# was left open.
IMPORT_CODE = ("<frozen importlib._bootstrap", "shibokensupport/")


def _importing(frame: Any) -> bool:
    """Whether Python is importing a module somewhere on this stack."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(IMPORT_CODE):
            return True
        frame = frame.f_back
    return False


def _alarm(_signum: int, frame: Any) -> None:
    """Stop the case, but never inside an import: a module left half-imported in sys.modules would make every later
    case fail with an import error. An import in progress is let finish, and the case is stopped just after it."""
    if _importing(frame):
        signal.setitimer(signal.ITIMER_REAL, IMPORT_DEFER_S)
        return
    _ALARM_FIRED[0] = True
    raise CaseTimeout


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise CaseTimeout in the block once `seconds` have passed (never inside an import: `_alarm`)."""
    _ALARM_FIRED[0] = False
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _measure(case: Case, settings: Settings) -> Result:
    if case.path == "bare":
        return measure_bare(case, settings)
    if case.path.endswith("2nd process"):
        return measure_second_process(case, settings)
    return measure_studio(case, settings)


def run_case(case: Case, settings: Settings) -> Result:
    gc.collect()
    if settings.device == "cuda":
        torch.cuda.empty_cache()
    in_process = not case.path.endswith("2nd process")  # the other has its own timeout
    try:
        with _time_limit(settings.case_timeout_s) if in_process else contextlib.nullcontext():
            result = _measure(case, settings)
    except CaseTimeout:
        result = Result(case, settings.resolution(case.family), note=f"timeout after {settings.case_timeout_s:g} s")
    except torch.OutOfMemoryError:
        result = Result(case, settings.resolution(case.family), note="out of memory")
    except Exception as exc:  # one broken case must not hide the others' figures
        result = Result(case, settings.resolution(case.family), note=f"failed: {error_line(exc, 120)}")
    finally:
        # The compiler keeps what it compiled for the case's model after the model is gone, and with it, on a GPU,
        # the CUDA graphs of a "graphs" case and the private memory they replay in: every later case ran on a
        # card that much smaller (its peak and whether it fits).
        torch.compiler.reset()
        gc.collect()
        if settings.device == "cuda":
            torch.cuda.empty_cache()
    if _ALARM_FIRED[0] and in_process:
        result = Result(case, settings.resolution(case.family), note=f"timeout after {settings.case_timeout_s:g} s")
    return _finish(result, settings)


def _header(settings: Settings) -> str:
    import diffusers

    where = (f"{torch.cuda.get_device_name()}, bf16 autocast" if settings.device == "cuda"
             else "CPU dry run (tiny models, fp32, 64 px): code paths only, no meaningful figures")
    return (f"{where}; torch {torch.__version__}, diffusers {diffusers.__version__}; LoRA rank 16, latents and "
            f"text cached, no checkpointing; {settings.steps} timed steps after {settings.warmup} warm-up steps; "
            "ops and kernels of one more step under torch.profiler")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="tiny models on the CPU: the code paths, no figures")
    parser.add_argument("--only", nargs="*", default=None,
                        help=f"families to measure (default: {' '.join(FAMILIES)}; also {' '.join(OPTIONAL_FAMILIES)})")
    parser.add_argument("--paths", nargs="*", default=None,
                        help=f"what to measure, of: {', '.join(repr(p) for p in (*PATHS, SECOND, *ABLATIONS))} "
                        "(default: all but the one-addition paths 'studio +...')")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 12; dry run 3)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 3; dry run 2)")
    parser.add_argument("--budget-s", "--budget", dest="budget", type=float, default=420.0,
                        help="start no case after this many seconds")
    parser.add_argument("--case-timeout-s", type=float, default=240.0, help="stop a case after this many seconds")
    parser.add_argument("--write-timeout-s", type=float, default=300.0,
                        help="stop writing a family's model after this many seconds (before its case's timeout)")
    parser.add_argument("--disk-gb", type=float, default=None,
                        help="plan the models' disk as if the work folder had this many GB free at the start "
                             "(default: its disk, read before each write; a dry run's tiny models plan none)")
    parser.add_argument("--out", type=Path, required=True, help="folder for table.md and results.json (nothing else)")
    parser.add_argument("--work", type=Path, default=None, help="folder for models, data and runs (default: temp)")
    parser.add_argument("--single", default=None, help=argparse.SUPPRESS)  # FAMILY:BATCH, compiled, JSON out
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or []) - {*FAMILIES, *OPTIONAL_FAMILIES})
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {', '.join((*FAMILIES, *OPTIONAL_FAMILIES))}")
    strange = sorted(set(args.paths or []) - {*PATHS, SECOND, *ABLATIONS})
    if strange:
        parser.error(f"unknown paths {strange}; choose from "
                     f"{', '.join(repr(p) for p in (*PATHS, SECOND, *ABLATIONS))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.dry_run and not torch.cuda.is_available():
        print("this benchmark needs a CUDA GPU (or --dry-run on the CPU)", file=sys.stderr)
        return 1
    if args.dry_run:
        torch.set_num_threads(1)
    scratch = args.work is None
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-train-speed-"))
    settings = Settings(args.dry_run, args.warmup or (2 if args.dry_run else 3), args.steps or (3 if args.dry_run else 12),
                        work, args.case_timeout_s)
    os.environ.setdefault("STUDIO_CACHE_DIR", str(settings.work / "cache"))  # a cold compile cache to start with
    if args.single:
        family, batch = args.single.split(":")
        result = run_case(Case(family, int(batch), "studio compiled"), settings)
        print(json.dumps({**asdict(result), "case": None}))
        return 0
    try:
        with ending_children():
            return measure_all(args, settings)
    finally:
        if scratch:
            shutil.rmtree(work, ignore_errors=True)


def measure_all(args: argparse.Namespace, settings: Settings) -> int:
    results: list[Result] = []
    header = _header(settings)
    print(header, flush=True)
    write_results(args.out, header, results)  # the table is there from the start, empty
    settings.work.mkdir(parents=True, exist_ok=True)
    models = FamilyModels(settings, Disk.planned(settings.work, args.disk_gb, args.dry_run), args.write_timeout_s)
    card = None if args.dry_run else torch.cuda.get_device_properties(0).total_memory / 2**30
    ordered = cases(list(args.only or FAMILIES), args.dry_run, list(args.paths or (*PATHS, SECOND)), card)
    began = time.monotonic()  # the budget is for the cases: imports and the header come before
    for index, case in enumerate(ordered):
        if time.monotonic() - began > args.budget:
            results.append(Result(case, settings.resolution(case.family), note="not run: time budget"))
            continue
        if case.family in OPTIONAL_FAMILIES and case.path != "bare" and args.paths is None and not args.dry_run:
            results.append(Result(case, settings.resolution(case.family),
                                  note="not run: its full-size pipeline (58 GB) would fill the disk; name the "
                                       "path with --paths to run it"))
            continue
        started = time.monotonic()
        note = models.prepare(case, ordered[index + 1:])  # before the case's timeout starts
        results.append(Result(case, settings.resolution(case.family), note=note) if note else run_case(case, settings))
        r = results[-1]
        print(f"[{time.monotonic() - began:5.0f} s] {case.family} b{case.batch} {case.path}: "
              f"{number(r.s_per_step, 3)} s/step, compile {number(r.compile_s, 1)} s, {r.note or 'ok'} "
              f"({time.monotonic() - started:.0f} s)", flush=True)
        write_results(args.out, header, results)
    text = write_results(args.out, header, results)
    print("\n" + text)
    return 0 if all(not r.note.startswith(("failed", "timeout")) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
