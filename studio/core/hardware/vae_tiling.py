"""Whether sample images are decoded tile by tile (sampling.vae_tiling): one rule for the trainer and the estimate.

The trainer asks `sampling_needs_tiling` once per run; the VRAM estimate counts the
VAE's decode with `vae_decode_mb(config, tiled=...)` and decides "auto" with
`decode_needs_tiling` from its own step terms (it must not call the estimate back).
So the memory a person is promised and the decode the trainer runs are the same one.
The estimate's module is imported inside the functions: it may import this one.
"""

from __future__ import annotations

from studio.core.config.schema import TrainConfig, resolved_weight_dtype
from studio.core.hardware.report import GPUInfo

MB = 1024 * 1024
# The side of one decode tile in pixels: the SD1.5 VAE's own tile size. The SDXL and SD3
# VAEs declare 1024, which would not tile a 1024 px sample at all.
TILE_PX = 512


def sample_side(config: TrainConfig) -> int:
    return config.sampling.size or config.dataset.resolution


def vae_bytes(config: TrainConfig) -> int:
    """Bytes per VAE weight and activation on a GPU: fp16 VAEs overflow, so they stay fp32 unless fp16-safe."""
    frozen = resolved_weight_dtype(config)
    if frozen == "fp32":
        return 4
    if frozen == "fp16" and not (config.model.family == "sdxl" and config.model.vae is not None):
        return 4
    return 2


def vae_weights_mb(config: TrainConfig) -> float:
    from studio.core.hardware.estimate import load_architecture

    arch = load_architecture(config.model.family)
    return int(arch["components"]["vae"]["params"]) * vae_bytes(config) / MB


def vae_decode_mb(config: TrainConfig, tiled: bool) -> float:
    """The VAE decoder's transient memory for one sample image (over its weights), whole or tiled."""
    from studio.core.hardware.estimate import load_architecture

    arch = load_architecture(config.model.family)
    side = sample_side(config)
    if tiled:
        side = min(side, TILE_PX)
    native = int(arch["native_resolution"])
    return float(arch["transients_mb"]["vae_decode_fp32"]) * (side / native) ** 2 * vae_bytes(config) / 4


def decode_needs_tiling(config: TrainConfig, steps_transient_mb: float) -> bool:
    """"auto": tile when decoding whole would need more than what a training step holds beyond the
    resident weights (`steps_transient_mb`: activations, or the VAE encode, plus gradients).

    Samples come between steps: the step's activations and gradients are gone, and the VAE
    comes back to the GPU for them when latents are cached. Tiling keeps the samples under
    the training peak.
    """
    brought_back = vae_weights_mb(config) if config.training.cache_latents else 0.0
    return brought_back + vae_decode_mb(config, tiled=False) > steps_transient_mb


def sampling_needs_tiling(config: TrainConfig, gpu_total_mb: float | None) -> bool:
    """Whether this run decodes its samples tiled: "on"/"off" as set; "auto" on a GPU by the rule above.

    `gpu_total_mb` is the training GPU's memory, None for a CPU run (system memory: never tiled by "auto").
    """
    mode = config.sampling.vae_tiling
    if mode != "auto":
        return mode == "on"
    sampling = config.sampling
    if gpu_total_mb is None or config.launch.cpu or not (sampling.every_n_steps and sampling.prompts):
        return False
    from studio.core.hardware.estimate import estimate_vram

    total = int(gpu_total_mb)
    estimate = estimate_vram(config, GPUInfo(index=0, name="training GPU", total_mb=total, free_mb=total))
    steps = max(estimate.activations_mb, estimate.vae_encode_mb) + estimate.gradients_mb
    return decode_needs_tiling(config, steps)
