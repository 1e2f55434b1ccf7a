"""Sample images between training steps: their stages, their peak, and whether the VAE decodes in tiles.

A sample is made in three stages: the text encoders encode the prompts (with cached text
embeddings the prompts were encoded with the captions, before the denoiser came to the GPU,
and this stage costs nothing), the denoiser runs (batch 2 for
guidance), then the VAE decodes (with cached latents it comes to the GPU for this
alone). The peak is the largest stage, not their sum. Each stage comes on top of what
the allocator still holds from the training step, less what it can reuse: weights
brought in fit the blocks the freed gradients leave, and a decoder's full-size planes
fit only the blocks of the VAE's encoder at the training size (measured on a GPU: a
1024 px decode after SDXL steps added the whole decode to the step's peak).

The trainer asks `sampling_needs_tiling` whether to decode tile by tile, so the estimate
and the run agree; tiles are `VAE_TILE_PX` pixels square.
"""

from __future__ import annotations

from dataclasses import dataclass

from studio.core.config.prompt_options import largest_side, sample_draws
from studio.core.config.schema import TrainConfig
from studio.core.estimate.memory_data import BYTES, scaled
from studio.core.estimate.memory_parts import RunFacts, run_facts
from studio.core.estimate.training_step import TrainingStep, prompts_cached, training_step
from studio.core.families import family

VAE_TILE_PX = 512  # the decoder's tile side in pixels (the overlap is blended by the VAE)


def sample_size(config: TrainConfig) -> int:
    """The side of the largest sample picture as a square of its pixels: a prompt's own --w/--h count, a
    768 x 1344 one more than sampling.size's 1024 x 1024."""
    width, height = largest_picture(config)
    return largest_side(width, height)


def largest_picture(config: TrainConfig) -> tuple[int, int]:
    """The (width, height) of the sample picture of the most pixels: sampling.size's, or a prompt's own."""
    side = config.sampling.size or config.dataset.resolution
    step = family(config.model.family).pixel_multiple
    sizes = [(draw.width, draw.height) for draw in sample_draws(config.sampling, config.dataset.resolution, step)]
    return max(sizes, key=lambda size: size[0] * size[1], default=(side, side))


def samples_on(config: TrainConfig) -> bool:
    return bool((config.sampling.every_n_steps or config.sampling.at_start) and config.sampling.prompts)


@dataclass
class SamplingStages:
    encode_prompts_mb: float
    denoise_mb: float
    decode_mb: float
    tiled: bool

    @property
    def peak_mb(self) -> float:
        return max(self.encode_prompts_mb, self.denoise_mb, self.decode_mb)

    @property
    def largest(self) -> str:
        stages = {"encoding the prompts": self.encode_prompts_mb, "denoising": self.denoise_mb,
                  "decoding with the VAE": self.decode_mb}
        return max(stages, key=lambda name: stages[name])


def vae_decode_mb(f: RunFacts, side: int, vae_bytes: int) -> float:
    """The VAE decoder's transient for one image of `side` pixels on this device."""
    counted = float(f.arch["transients_mb"]["vae_decode_fp32"])
    return scaled(counted, side, f.native, 1, vae_bytes) * f.factor("vae_decode_factor")


def _base_mb(f: RunFacts, step: TrainingStep) -> float:
    """What a stage starts from: on a GPU the step's whole pool (the allocator keeps it); on the CPU
    the live tensors (gradients are freed between steps, the activations with them)."""
    if f.gpu:
        return step.peak_mb
    return step.peak_mb - step.dynamic_mb - step.mb("gradients")


def sampling_stages(f: RunFacts, step: TrainingStep, tiled: bool) -> SamplingStages:
    config = f.config
    base = _base_mb(f, step)
    freed = step.mb("gradients") if f.gpu else 0.0  # weights brought in reuse the freed gradients' blocks
    grow = 1 + f.slack
    side = sample_size(config)

    brought = 0.0 if step.encoders.resident else step.encoders.all_mb
    prompt = scaled(float(f.arch["transients_mb"]["text_encoder_fp16"]), side, side, 2, BYTES[f.frozen] * 2)
    # Prompts embedded with the cached captions: no encoder comes back and nothing is encoded.
    encode_prompts = 0.0 if prompts_cached(config) else base + max(0.0, brought - freed) + prompt * grow

    denoise = base + scaled(float(f.arch["transients_mb"]["denoiser_sampling_fp16"]), side, f.native, 1,
                            BYTES[f.frozen] * 2) * grow

    autoencoder = step.vae
    if config.dataset.kind == "edit":  # an edit's pipeline encodes its control images with the VAE as it denoises
        denoise += max(0.0, (0.0 if autoencoder.resident else autoencoder.weights_mb) - freed)
    decoded = vae_decode_mb(f, min(side, VAE_TILE_PX) if tiled else side, autoencoder.bytes) * grow
    reusable = autoencoder.encode_mb * grow if (autoencoder.resident and f.gpu) else 0.0
    vae_in = 0.0 if autoencoder.resident else autoencoder.weights_mb
    decode = base + max(0.0, vae_in - freed) + max(0.0, decoded - reusable)
    return SamplingStages(encode_prompts, denoise, decode, tiled)


def needs_tiling(f: RunFacts, step: TrainingStep) -> bool:
    """sampling.vae_tiling as set; "auto" tiles on a GPU when decoding whole images would need more
    memory than the training steps (and the sample is larger than one tile)."""
    choice = f.config.sampling.vae_tiling
    if choice != "auto":
        return choice == "on"
    if not f.gpu or sample_size(f.config) <= VAE_TILE_PX:
        return False
    return sampling_stages(f, step, tiled=False).decode_mb > step.peak_mb


def sampling_needs_tiling(config: TrainConfig, gpu_total_mb: int) -> bool:
    """Whether the trainer decodes sample images tile by tile on a GPU of `gpu_total_mb` MiB
    (0 when it trains on the CPU): the same answer the VRAM estimate builds on."""
    device = "gpu" if gpu_total_mb > 0 and not config.launch.cpu else "cpu"
    facts = run_facts(config, device)
    return needs_tiling(facts, training_step(facts))
