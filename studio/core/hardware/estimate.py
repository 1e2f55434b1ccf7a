"""Peak VRAM of a training config on one GPU, before anything runs.

Sizes come from data, not constants typed here: parameter counts and the
activations saved for backward are counted from the real architectures by
`benchmarks/count_parameters.py` (resources/architectures/<family>.json); how
saved activations turn into a peak is measured by
`benchmarks/memory_calibration.py` (resources/architectures/calibration.json).
Pure Python: a full estimate takes well under a millisecond.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Literal

from studio.core.config.schema import TrainConfig, resolved_weight_dtype
from studio.core.hardware.report import GPUInfo
from studio.core.resources import resource_path

Fit = Literal["fits", "tight", "does_not_fit"]
TIGHT_MARGIN = 0.10  # within 10% of the room left is "tight"
MB = 1024 * 1024
BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


class ArchitectureDataError(RuntimeError):
    """The shipped architecture data is missing or damaged (a broken install)."""


@lru_cache(maxsize=8)
def load_architecture(family: str) -> dict[str, Any]:
    return _read_json("architectures", f"{family}.json")


@lru_cache(maxsize=1)
def load_calibration() -> dict[str, Any]:
    return _read_json("architectures", "calibration.json")


def _read_json(*parts: str) -> dict[str, Any]:
    path = resource_path(*parts)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArchitectureDataError(
            f"{path}: cannot be read ({exc}); reinstall the studio or run benchmarks/count_parameters.py"
        ) from None
    if not isinstance(data, dict):
        raise ArchitectureDataError(f"{path}: must hold a JSON object")
    return data


@dataclass
class MemoryPart:
    key: str
    label: str
    mb: float
    detail: str = ""


@dataclass
class VramEstimate:
    """The peak memory of one training process (per GPU), in MiB, and where it goes."""

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
    overhead_mb: float = 0.0  # CUDA context, library workspaces, allocator slack
    training_peak_mb: float = 0.0
    caching_peak_mb: float = 0.0  # encoding latents / captions before training
    sampling_peak_mb: float = 0.0  # sample images during training (VAE decode at the sample size)
    total_mb: float = 0.0
    parts: list[MemoryPart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def total_gb(self) -> float:
        return self.total_mb / 1024

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _denoiser(arch: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in arch["components"].values() if c["role"] == "denoiser")


def lora_params(targets: dict[str, Any], rank: int, dora: bool = False) -> int:
    """Parameters of a LoRA of `rank` over the given target layers (A: in x r, B: r x out)."""
    count = rank * int(targets["in_plus_out"])
    if dora:  # one magnitude per output feature
        count += sum(int(s["out"]) * int(s["count"]) for s in targets["shapes"])
    return count


def _precision_key(config: TrainConfig, device: str) -> str:
    if device == "cpu":
        return "fp32"
    if config.training.mixed_precision != "no":
        return "mixed"
    return "fp32" if resolved_weight_dtype(config) == "fp32" else "fp16"


def _uses_gpu(config: TrainConfig, gpu: GPUInfo | None) -> bool:
    return gpu is not None and not config.launch.cpu


def _vae_bytes(config: TrainConfig, frozen: str) -> int:
    """Bytes per VAE weight and activation as the trainers keep it.

    The SD1.5, SDXL and SD3 VAEs overflow in fp16, so with fp16 weights the VAE
    stays in fp32: the studio's SD1.5 trainer does so, diffusers' SDXL and SD3
    training scripts do so unless a separate fp16-safe VAE is given (SDXL:
    madebyollin/sdxl-vae-fp16-fix). bf16 does not overflow.
    """
    if frozen != "fp16":
        return BYTES[frozen]
    if config.model.family == "sdxl" and config.model.vae is not None:
        return 2
    return 4


def _scaled(mb_at_native: float, side: int, native: int, batch: int, bytes_: int = 4) -> float:
    """A transient counted at the native size in fp32, for another size, batch and width (linear in pixels)."""
    return mb_at_native * (side / native) ** 2 * batch * bytes_ / 4


def estimate_vram(config: TrainConfig, gpu: GPUInfo | None) -> VramEstimate:
    """Peak memory per GPU for `config`; with no GPU (or launch.cpu) the peak RAM of a CPU run (fp32)."""
    arch = load_architecture(config.model.family)
    cal = load_calibration()
    device = "gpu" if _uses_gpu(config, gpu) else "cpu"
    t, m = config.training, config.method
    full = m.kind == "dreambooth"
    notes: list[str] = []
    frozen = "fp32" if device == "cpu" else resolved_weight_dtype(config)
    fb = BYTES[frozen]
    prior = any(c.uses_prior_preservation for c in config.dataset.concepts)
    batch = t.batch_size * (2 if prior else 1)
    if prior:
        notes.append("prior preservation doubles the batch (instance + class images)")
    est = VramEstimate(family=config.model.family, method=m.kind, device=device,
                       resolution=config.dataset.resolution, batch=batch)
    parts = est.parts

    # --- the denoiser and what is trained
    den = _denoiser(arch)
    trained = 0
    # Floating buffers (SD3's position-embedding table) sit on the GPU in the weights' dtype.
    buffers = int(den.get("float_buffers", 0))
    if full:
        trained = int(den["params"])
        est.weights_mb = (trained + buffers) * 4 / MB
        parts.append(MemoryPart("weights", f"{den['class']} weights", est.weights_mb,
                                f"{trained / 1e6:,.0f} M parameters, fp32 (trained)"))
    else:
        est.weights_mb = (int(den["params"]) + buffers) * fb / MB
        parts.append(MemoryPart("weights", f"{den['class']} weights", est.weights_mb,
                                f"{int(den['params']) / 1e6:,.0f} M parameters, {frozen} (frozen)"))
        lora = lora_params(den["lora_targets"], m.rank, m.use_dora)
        if m.blocks and den.get("blocks"):
            lora = lora * len(set(m.blocks)) // int(den["blocks"])
        if m.target_modules:
            notes.append("custom LoRA target modules: the estimate assumes the family's attention projections")
        trained = lora

    # --- text encoders and VAE
    te_resident_mb, te_all_mb = 0.0, 0.0
    for name, comp in arch["components"].items():
        if not comp["role"].startswith("text_encoder"):
            continue
        if comp["role"] == "text_encoder_t5" and not config.model.use_t5:
            continue
        size = int(comp["params"]) * fb / MB
        te_all_mb += size
        if m.train_text_encoder and "lora_targets" in comp:
            if full:
                trained += int(comp["params"])
                size = int(comp["params"]) * 4 / MB
            else:
                trained += lora_params(comp["lora_targets"], m.text_encoder_rank or m.rank, m.use_dora)
        elif t.cache_text_embeddings:
            continue  # encoded once before training, then moved off the GPU
        te_resident_mb += size
        parts.append(MemoryPart("text_encoders", name, size, comp["class"]))
    est.text_encoders_mb = te_resident_mb

    vae = arch["components"]["vae"]
    vae_bytes = _vae_bytes(config, frozen)
    vae_mb = int(vae["params"]) * vae_bytes / MB
    side, native = config.dataset.resolution, int(arch["native_resolution"])
    # Peak of the VAE encoder's no-grad forward, counted on the meta device (five
    # 128-channel full-size planes live at once in the first down block).
    transients = arch["transients_mb"]
    encode_mb = _scaled(float(transients["vae_encode_fp32"]), side, native, batch, vae_bytes)
    if not t.cache_latents:
        est.vae_mb, est.vae_encode_mb = vae_mb, encode_mb
        parts.append(MemoryPart("vae", "VAE", vae_mb, f"{vae_bytes * 8}-bit, encodes each batch"))

    # --- trained parameters: weights (LoRA), gradients, optimizer state
    est.trainable_params = trained
    if not full:
        est.trainable_mb = trained * 4 / MB
        parts.append(MemoryPart("trainable", "LoRA weights", est.trainable_mb,
                                f"{trained / 1e6:,.1f} M parameters, fp32"))
    est.gradients_mb = trained * 4 / MB
    if config.launch.num_processes > 1:
        est.gradients_mb *= 2  # DDP keeps a bucket copy of every gradient
        notes.append("multi-GPU: gradients are counted twice (DDP communication buckets)")
    parts.append(MemoryPart("gradients", "Gradients", est.gradients_mb, "fp32"))
    optimizer = t.optimizer
    if optimizer == "adamw8bit" and device == "cpu":
        optimizer = "adamw"
        notes.append("8-bit Adam needs a CUDA GPU; a CPU run uses AdamW")
    est.optimizer_mb = trained * float(cal["optimizer_bytes_per_param"][optimizer]) / MB
    parts.append(MemoryPart("optimizer", f"Optimizer state ({optimizer})", est.optimizer_mb, ""))

    # --- activations: counted at the native size, scaled by pixels and batch, then calibrated
    gc = t.gradient_checkpointing
    counted = arch["activations_mb"]
    key = f"{'full' if full else 'lora'}{'_checkpointing' if gc else ''}_{_precision_key(config, device)}"
    scale = batch * (side / int(counted["resolution"])) ** 2
    factor = float(cal["activation_peak_factor"]["checkpointing" if gc else "no_checkpointing"])
    est.activations_mb = float(counted[key]) * scale * factor
    parts.append(MemoryPart("activations", "Activations", est.activations_mb,
                            f"{side} px, batch {batch}, {'with' if gc else 'without'} gradient checkpointing"))
    if not t.cache_latents and encode_mb > est.activations_mb:
        parts.append(MemoryPart("vae_encode", "VAE encoding (transient)", encode_mb - est.activations_mb,
                                "larger than the activations at this size"))

    # --- fixed costs
    dynamic = max(est.activations_mb, est.vae_encode_mb)
    if device == "gpu":
        g = cal["gpu"]
        est.overhead_mb = float(g["cuda_context_mb"]) + float(g["workspace_mb"]) + dynamic * float(g["allocator_fraction"])
        detail = "CUDA context, cuDNN/cuBLAS workspaces, allocator slack"
    else:
        c = cal["cpu"]
        est.overhead_mb = float(c["runtime_mb"]) + float(c["workspace_mb"])
        detail = "Python and torch runtime, kernel workspaces"
    parts.append(MemoryPart("overhead", "Runtime overhead", est.overhead_mb, detail))

    static = (est.weights_mb + est.text_encoders_mb + est.vae_mb + est.trainable_mb + est.gradients_mb
              + est.optimizer_mb + est.overhead_mb)
    est.training_peak_mb = static + dynamic
    slack = float(cal["gpu"]["allocator_fraction"]) if device == "gpu" else 0.0
    fixed = est.overhead_mb - dynamic * slack
    caching = 0.0
    if t.cache_text_embeddings and not m.train_text_encoder:
        caching = te_all_mb + _scaled(float(transients["text_encoder_fp16"]), side, side, batch, fb) * (1 + slack)
    if t.cache_latents:
        caching = max(caching, vae_mb + encode_mb * (1 + slack))
    est.caching_peak_mb = fixed + caching if caching else 0.0
    est.sampling_peak_mb = _sampling_peak(config, est, transients, native, te_all_mb, vae_mb, vae_bytes, fb, slack)
    if est.sampling_peak_mb:
        est.sampling_peak_mb += fixed
    est.total_mb = max(est.training_peak_mb, est.caching_peak_mb, est.sampling_peak_mb)
    if est.caching_peak_mb > est.training_peak_mb:
        notes.append(f"the caching phase is the peak ({est.caching_peak_mb / 1024:.1f} GB): "
                     "the text encoders or VAE alone need more than training")
    if est.sampling_peak_mb > max(est.training_peak_mb, est.caching_peak_mb):
        notes.append(f"sample images are the peak ({est.sampling_peak_mb / 1024:.1f} GB): the VAE decodes "
                     f"{config.sampling.size or side} px images with the text encoders loaded; "
                     "a smaller sampling size or no samples lowers it")
    est.notes = notes
    return est


def _sampling_peak(config: TrainConfig, est: VramEstimate, transients: dict[str, Any], native: int,
                   te_all_mb: float, vae_mb: float, vae_bytes: int, fb: int, slack: float) -> float:
    """Sample images between steps: the model, optimizer state, every text encoder and the VAE are
    resident (gradients are freed by zero_grad), plus the larger of the denoiser's no-grad forward
    (batch 2 for guidance) and the VAE decoder at the sample size, both counted on the meta device."""
    s = config.sampling
    if not (s.every_n_steps and s.prompts):
        return 0.0
    side = s.size or config.dataset.resolution
    decode = _scaled(float(transients["vae_decode_fp32"]), side, native, 1, vae_bytes)
    denoise = _scaled(float(transients["denoiser_sampling_fp16"]), side, native, 1, fb * 2)
    resident = est.weights_mb + te_all_mb + vae_mb + est.trainable_mb + est.optimizer_mb
    return resident + max(decode, denoise) * (1 + slack)


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
