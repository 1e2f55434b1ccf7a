"""Peak system memory (RAM) of a training on this machine, beside the VRAM estimate, before anything runs.

A run's RAM peaks in one of three phases, each the sum of its parts (`ram_parts.py`, one function
per part): loading the model (the whole pipeline sits in system memory before it moves to the GPU),
filling the caches (the denoiser waits in system memory beside the latents, and the encoders with
model.text_encoder_on_cpu), and training (parked encoders and VAE, caches that stay on the CPU, an
EMA on the CPU, the data-loading workers, a checkpoint being written). Every training process on the
machine holds its own copy. Compared with the machine's total RAM: over 95% is refused before launch,
over 80% is a warning (other programs, or Windows' spill of GPU memory into shared system memory,
take the rest). Pure Python: the same sizes as the VRAM estimate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from studio.core.config.files.paths import ResolvedConfig
from studio.core.estimate.block_swap_parts import pinned_blocks
from studio.core.estimate.memory_parts import MemoryPart, run_facts
from studio.core.estimate.ram.ram_parts import (
    GB,
    RamFacts,
    baseline,
    checkpoint_save,
    cpu_training_step,
    dataloader_workers,
    dataset_images,
    denoiser_waiting,
    ema_on_cpu,
    encoders_on_cpu,
    file_read,
    fp8_conversion,
    idle_encoders_on_cpu,
    latent_cache,
    load_ram_figures,
    parked_encoders,
    parked_vae,
    pipeline_load,
    quantized_conversion,
    text_cache,
)
from studio.core.estimate.training_step import training_step
from studio.core.hardware.report import GPUInfo

RamFit = Literal["fits", "tight", "does_not_fit"]
REFUSE_SHARE = 0.95  # over this share of the machine's RAM a run is refused before launch
WARN_SHARE = 0.80  # over this share it is a warning
PHASE_WORDS = {"loading": "while the model loads", "converting": "while the denoiser is turned to fp8",
               "quantizing": "while the denoiser is quantized",
               "caching": "while the caches fill", "training": "while training"}


@dataclass
class RamEstimate:
    """The peak system memory of the training processes on one machine, in MiB: the parts of the phase
    that peaks (they add up to `total_mb`), and each phase's total."""

    total_mb: float = 0.0
    phase: str = "loading"  # loading | converting | quantizing | caching | training
    parts: list[MemoryPart] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    phase_parts: dict[str, list[MemoryPart]] = field(default_factory=dict)  # every phase's parts
    images: int = 0
    processes: int = 1
    notes: list[str] = field(default_factory=list)

    @property
    def total_gb(self) -> float:
        return self.total_mb / GB

    @property
    def when(self) -> str:
        return PHASE_WORDS[self.phase]

    def mb(self, key: str, phase: str | None = None) -> float:
        """A part's size in the peak phase (or in `phase`)."""
        return sum(p.mb for p in self.phase_parts.get(phase or self.phase, []) if p.key == key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_ram(config: ResolvedConfig, gpu: GPUInfo | None, images: int | None = None) -> RamEstimate:
    """Peak RAM of `config` on a machine whose first GPU is `gpu` (None: a CPU run); `images` is the dataset's
    size (default: the images in its concept folders, and the class images it asks for)."""
    on_gpu = gpu is not None and not config.launch.cpu
    f = run_facts(config, "gpu" if on_gpu else "cpu")
    step = training_step(f)
    launch = config.launch
    r = RamFacts(f, load_ram_figures(), dataset_images(config) if images is None else images,
                 float(gpu.total_mb) if on_gpu and gpu is not None else 0.0,
                 -(-launch.num_processes // launch.num_machines))
    trained = step.trained_params
    phases: dict[str, list[MemoryPart | None]] = {
        "loading": [baseline(r), pipeline_load(r), file_read(r)],
        "training": [baseline(r), cpu_training_step(r, step.peak_mb - step.mb("overhead")), parked_encoders(r),
                     parked_vae(r), latent_cache(r, training=True), text_cache(r, training=True),
                     ema_on_cpu(r, trained), dataloader_workers(r), checkpoint_save(r, trained), pinned_blocks(r)],
    }
    if config.training.cache_latents or config.training.cache_text_embeddings:
        phases["caching"] = [baseline(r), denoiser_waiting(r), encoders_on_cpu(r),
                             latent_cache(r, training=False), text_cache(r, training=False)]
    if fp8_conversion(r) is not None:  # before the caches fill, the waiting denoiser is turned to fp8
        phases["converting"] = [baseline(r), fp8_conversion(r), idle_encoders_on_cpu(r)]
    if quantized_conversion(r) is not None:  # after the caches fill, the waiting denoiser is quantized to the GPU
        phases["quantizing"] = [baseline(r), quantized_conversion(r), parked_encoders(r), parked_vae(r),
                                latent_cache(r, training=False), text_cache(r, training=False)]
    kept = {name: [p for p in parts if p is not None and p.mb > 0] for name, parts in phases.items()}
    totals = {name: sum(p.mb for p in parts) for name, parts in kept.items()}
    peak = max(totals, key=lambda name: totals[name])
    est = RamEstimate(totals[peak], peak, kept[peak], totals, kept, r.images, r.processes)
    if r.images == 0 and (config.training.cache_latents or config.training.cache_text_embeddings):
        est.notes.append("no images found in the dataset folders: the caches are counted empty")
    return est


def ram_fit(estimate: RamEstimate, ram_mb: float) -> RamFit | None:
    """fits, tight (over 80% of the machine's RAM) or does_not_fit (over 95%); None when the RAM is unknown."""
    if ram_mb <= 0:
        return None
    if estimate.total_mb > ram_mb * REFUSE_SHARE:
        return "does_not_fit"
    return "tight" if estimate.total_mb > ram_mb * WARN_SHARE else "fits"


@dataclass
class RamFix:
    changes: dict[str, Any]
    words: str  # what to do, as a person reads it
    total_mb: float  # the estimate with it (and the fixes before it)


_ENCODER_ON_GPU = "keep the text encoder on the GPU (model.text_encoder_on_cpu = false; it needs GPU memory then)"
# What lowers each part, cheapest first: (the part it acts on, the changes, the words).
_FIXES: list[tuple[str, dict[str, Any], str]] = [
    ("workers", {"training.dataloader_workers": 0}, "lower training.dataloader_workers (to 0: batches are read "
                                                     "by the training process itself)"),
    ("text_encoders", {"model.text_encoder_on_cpu": False}, _ENCODER_ON_GPU),
    ("ema", {"training.ema_on_cpu": False}, "keep the EMA on the GPU (training.ema_on_cpu = false)"),
    ("swapped_blocks", {"model.blocks_to_swap": 0},
     "keep every block on the GPU (model.blocks_to_swap = 0; it needs GPU memory then)"),
    ("latent_cache", {"training.cache_latents": False, "training.cache_latents_to_disk": False},
     "turn off the latent cache (training.cache_latents = false: the VAE encodes each batch on the GPU)"),
    ("text_cache", {"training.cache_text_embeddings": False},
     "turn off the text cache (training.cache_text_embeddings = false: the text encoder embeds each batch on the "
     "GPU)"),
    ("model_load", {"model.dtype": "bf16"}, "load the frozen weights in 16 bits (model.dtype = \"bf16\")"),
]


def ram_fixes(config: ResolvedConfig, gpu: GPUInfo | None, estimate: RamEstimate) -> list[RamFix]:
    """The config changes that lower the peak, each on top of the ones before it, cheapest first."""
    from studio.core.estimate.plans.fixes import apply_changes

    fixes: list[RamFix] = []
    current, now = config, estimate
    for key, changes, words in _FIXES:
        if key not in {p.key for p in now.parts} or any(fix.changes == changes for fix in fixes):
            continue
        try:
            changed = apply_changes(current, changes)
            after = estimate_ram(changed, gpu, estimate.images)
        except (ValidationError, ValueError, KeyError):
            continue
        if after.total_mb < now.total_mb * 0.99:
            fixes.append(RamFix(changes, words, after.total_mb))
            current, now = changed, after
    return fixes


def describe_ram(estimate: RamEstimate, ram_mb: float) -> str:
    """"RAM: 21.3 GB of 32 GB (peak while the model loads)" or, with the machine's RAM unknown, without it."""
    of = f" of {ram_mb / GB:.0f} GB" if ram_mb > 0 else ""
    return f"RAM: {estimate.total_gb:.1f} GB{of} (peak {estimate.when})"


def ram_problem(config: ResolvedConfig, gpu: GPUInfo | None, ram_mb: float,
                estimate: RamEstimate | None = None) -> tuple[RamFit, str] | None:
    """(tight | does_not_fit, the sentence that says so and what to do), or None when it fits or RAM is unknown."""
    estimate = estimate or estimate_ram(config, gpu)
    verdict = ram_fit(estimate, ram_mb)
    if verdict in (None, "fits"):
        return None
    assert verdict is not None
    need, have = estimate.total_gb, ram_mb / GB
    share = estimate.total_mb / ram_mb
    head = (f"The run needs about {need:.1f} GB of system RAM (peak {estimate.when}: "
            f"{_largest(estimate)}), {share:.0%} of this machine's {have:.0f} GB")
    fixes = ram_fixes(config, gpu, estimate)
    fitting = [fix for fix in fixes if fix.total_mb <= ram_mb * REFUSE_SHARE]
    if fixes:
        steps = "; then ".join(f"{fix.words} → {fix.total_mb / GB:.1f} GB" for fix in fixes)
        todo = f"{steps}" if fitting else f"{steps}; even then this model needs " \
                                          f"{fixes[-1].total_mb / GB:.1f} GB of RAM and this machine has {have:.0f} GB"
    else:
        todo = f"this model needs {need:.1f} GB of RAM; this machine has {have:.0f} GB"
    if verdict == "does_not_fit":
        end = "" if fitting else ": add memory, use a machine with more, or choose a smaller model"
        return verdict, f"{head}, more than it can hold: {todo}{end}."
    return verdict, f"{head}: other programs may push it into swap; to lower it, {todo}."


def _largest(estimate: RamEstimate) -> str:
    parts = sorted((p for p in estimate.parts if p.key != "baseline"), key=lambda p: -p.mb)[:2]
    return ", ".join(f"{p.label} {p.mb / GB:.1f} GB" for p in parts) or "the libraries"
