"""Peak VRAM of a training config on one GPU, before anything runs.

The peak is the largest of three phases: the training step (`training_step.py`, from one
function per memory part in `memory_parts.py`), the caching phase before it, and sample
images between steps (`sampling_plan.py`). Sizes come from data, not constants typed
here: parameter counts and activations counted on the meta device
(`resources/architectures/<family>.json`, by `benchmarks/count_parameters.py`), and how
those counts become what nvidia-smi shows, fitted to measured GPU peaks
(`resources/architectures/calibration.json`, checked against `gpu_peaks.json`).
Pure Python: a full estimate takes well under a millisecond.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.schema import TrainConfig
from studio.core.estimate.block_swap_parts import swap_note
from studio.core.estimate.memory_data import (
    ArchitectureDataError,
    load_architecture,
    load_calibration,
    lora_params,
)
from studio.core.estimate.memory_parts import MemoryPart, run_facts
from studio.core.estimate.sampling_plan import (
    VAE_TILE_PX,
    SamplingStages,
    largest_picture,
    needs_tiling,
    samples_on,
    sampling_stages,
)
from studio.core.estimate.sharded.sharded_parts import loading_peak
from studio.core.estimate.training_step import (
    TrainingStep,
    caching_peak,
    denoiser_waits_for_caches,
    training_step,
)
from studio.core.hardware.report import GPUInfo

__all__ = [
    "ArchitectureDataError", "Fit", "MemoryPart", "VramEstimate", "available_mb", "estimate_vram", "fit",
    "load_architecture", "load_calibration", "lora_params", "other_processes_warning",
]

Fit = Literal["fits", "tight", "does_not_fit"]
TIGHT_MARGIN = 0.10  # within 10% of the room left is "tight"


@dataclass
class VramEstimate:
    """The peak memory of one training process (per GPU), in MiB, and where it goes.

    `parts` add up to `total_mb`: the training step's parts, then what the caching phase
    or the sample images add over the step when one of them is the peak."""

    family: str
    method: str
    device: str  # gpu | cpu
    resolution: int
    batch: int
    weights_mb: float = 0.0  # the denoiser (frozen, or fp32 master weights when fully trained)
    text_encoders_mb: float = 0.0
    vae_mb: float = 0.0
    trainable_params: int = 0
    trainable_mb: float = 0.0  # fp32 LoRA weights (full fine-tunes count theirs in weights_mb)
    gradients_mb: float = 0.0
    optimizer_mb: float = 0.0
    activations_mb: float = 0.0
    vae_encode_mb: float = 0.0  # transient, before the denoiser's forward
    overhead_mb: float = 0.0  # CUDA context and library workspaces (or the CPU runtime)
    allocator_mb: float = 0.0  # the caching allocator's slack over the largest transient
    training_peak_mb: float = 0.0
    caching_peak_mb: float = 0.0  # encoding latents / captions before training
    loading_peak_mb: float = 0.0  # a sharded run: the whole model on every GPU before it is sharded
    sampling_peak_mb: float = 0.0  # sample images during training (largest of their stages)
    sampling_stage: str = ""  # the stage of a sample that peaks
    vae_tiling: bool = False  # sample images decode tile by tile
    total_mb: float = 0.0
    parts: list[MemoryPart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def total_gb(self) -> float:
        return self.total_mb / 1024

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_vram(config: ResolvedConfig, gpu: GPUInfo | None,
                 calibration: dict[str, Any] | None = None) -> VramEstimate:
    """Peak memory per GPU for `config` (its paths resolved: a model folder of the project is sized as it
    is, `local_architecture.py`); with no GPU (or launch.cpu) the peak RAM of a CPU run (fp32).
    `calibration` replaces the shipped `calibration.json` (fitting it to measured peaks)."""
    facts = run_facts(config, "gpu" if gpu is not None and not config.launch.cpu else "cpu", calibration)
    step = training_step(facts)
    est = VramEstimate(family=config.model.family, method=config.method.kind, device=facts.device,
                       resolution=config.dataset.resolution, batch=facts.batch, parts=list(step.parts))
    _copy_step_terms(est, step)
    est.caching_peak_mb = caching_peak(facts, step)
    est.loading_peak_mb = loading_peak(facts, step.mb("overhead"), step.encoders.all_mb + step.vae.weights_mb)
    if samples_on(config):
        est.vae_tiling = needs_tiling(facts, step)
        stages = sampling_stages(facts, step, est.vae_tiling)
        est.sampling_peak_mb, est.sampling_stage = stages.peak_mb, stages.largest
        _note_sampling(est, stages, largest_picture(config), config.sampling.size or config.dataset.resolution)
    est.total_mb = max(est.training_peak_mb, est.caching_peak_mb, est.sampling_peak_mb, est.loading_peak_mb)
    _add_phase_part(est, config, facts.shards > 1)
    est.notes = facts.notes + swap_note(facts) + est.notes
    return est


def _copy_step_terms(est: VramEstimate, step: TrainingStep) -> None:
    est.weights_mb = step.mb("weights")
    est.text_encoders_mb = step.encoders.resident_mb
    est.vae_mb = step.mb("vae")
    est.trainable_params = step.trained_params
    est.trainable_mb = step.mb("trainable")
    est.gradients_mb = step.mb("gradients")
    est.optimizer_mb = step.mb("optimizer")
    est.activations_mb = step.mb("activations")
    est.vae_encode_mb = step.vae.encode_mb if step.vae.resident else 0.0
    est.overhead_mb = step.mb("overhead")
    est.allocator_mb = step.mb("allocator")
    est.training_peak_mb = step.peak_mb


def _note_sampling(est: VramEstimate, stages: SamplingStages, picture: tuple[int, int], side: int) -> None:
    if stages.tiled:
        est.notes.append(f"sample images are decoded in {VAE_TILE_PX} px tiles (sampling.vae_tiling)")
    if stages.peak_mb <= max(est.training_peak_mb, est.caching_peak_mb):
        return
    width, height = picture
    own = picture != (side, side)  # a prompt's own --w/--h draws the largest
    size = f"a {width} x {height} px image (a prompt's --w and --h)" if own else f"{side} px images"
    smaller = "a smaller --w and --h" if own else "a smaller sampling.size"
    fixes = f"sampling.vae_tiling = \"on\", {smaller} or no samples lower it" if not stages.tiled \
        else f"{smaller} or no samples lower it"
    est.notes.append(f"sample images are the peak ({stages.peak_mb / 1024:.1f} GB while {stages.largest} for "
                     f"{size}, on top of what the training steps hold); {fixes}")


def _add_phase_part(est: VramEstimate, config: TrainConfig, sharded: bool) -> None:
    """When caching or sampling is the peak, one more part says how much it adds over the step."""
    over = est.total_mb - est.training_peak_mb
    if over <= 0:
        return
    if est.total_mb == est.sampling_peak_mb:
        est.parts.append(MemoryPart("sampling", "Sample images (over the step)", over,
                                    f"peak while {est.sampling_stage}"))
    elif est.total_mb == est.loading_peak_mb:
        est.parts.append(MemoryPart("loading", "Loading before sharding (over the step)", over,
                                    "every GPU loads the whole model, then keeps its shards"))
        est.notes.append(f"loading is the peak ({est.loading_peak_mb / 1024:.1f} GB): each GPU holds the whole "
                         "model in fp32 until it is sharded")
    else:
        held = denoiser_waits_for_caches(config, sharded)
        encoders = "the VAE (the text encoders embed on the CPU)" if config.model.text_encoder_on_cpu \
            else "the encoders and the VAE"
        what = encoders if held else "the whole model loaded"
        est.parts.append(MemoryPart("caching", "Caching phase (over the step)", over,
                                    f"{what} while the encoders fill the caches"))
        loaded = f"{encoders} on the GPU (the model waits in system memory)" if held \
            else "the model and its encoders are loaded"
        est.notes.append(f"the caching phase is the peak ({est.caching_peak_mb / 1024:.1f} GB): {loaded} while "
                         "latents or captions are encoded")


def available_mb(gpu: GPUInfo) -> float:
    """Room a training can take: what is free now (other programs keep theirs)."""
    return float(gpu.free_mb if 0 < gpu.free_mb <= gpu.total_mb else gpu.total_mb)


def fit(estimate: VramEstimate, gpu: GPUInfo | None) -> Fit:
    """fits, tight (within 10% of the room) or does_not_fit; a CPU run is compared with RAM elsewhere."""
    if gpu is None:
        return "fits"
    room = available_mb(gpu)
    if estimate.total_mb <= room * (1 - TIGHT_MARGIN):
        return "fits"
    if estimate.total_mb <= room:
        return "tight"
    return "does_not_fit"


def other_processes_warning(gpu: GPUInfo) -> str | None:
    """A warning when other programs already hold a noticeable share of the GPU."""
    held = max(gpu.other_processes_mb, gpu.total_mb - gpu.free_mb)
    if held < max(512, gpu.total_mb * 0.05):
        return None
    return (f"Other programs already hold {held / 1024:.1f} GB on GPU {gpu.index} ({gpu.name}); "
            "the estimate is compared with the free memory. Close them to get the full "
            f"{gpu.total_mb / 1024:.0f} GB.")
