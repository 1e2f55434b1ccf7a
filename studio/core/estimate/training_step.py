"""The memory of a training step and of the caching phase before it, put together from the parts."""

from __future__ import annotations

from dataclasses import dataclass, field

from studio.core.config.schema import TrainConfig
from studio.core.estimate.block_swap_parts import swapped_weights
from studio.core.estimate.memory_data import BYTES, scaled
from studio.core.estimate.memory_parts import (
    MemoryPart,
    RunFacts,
    TextEncoders,
    Vae,
    activations,
    allocator_slack,
    denoiser_lora_params,
    denoiser_weights,
    fp8_upcast_copies,
    gradients,
    moving_average,
    optimizer_state,
    runtime_overhead,
    text_encoders,
    vae,
    weight_copies,
)
from studio.core.estimate.quantized_parts import quantized_weights, quantized_working_copy
from studio.core.estimate.sharded.sharded_parts import fsdp_parts


@dataclass
class TrainingStep:
    """The parts of one step (they add up to `peak_mb`) and what caching and sampling reuse."""

    parts: list[MemoryPart]
    encoders: TextEncoders
    vae: Vae
    trained_params: int
    dynamic_mb: float  # the larger of the activations and the VAE encoder's transient
    peak_mb: float = 0.0
    by_key: dict[str, float] = field(default_factory=dict)

    def mb(self, key: str) -> float:
        return self.by_key.get(key, 0.0)


def training_step(f: RunFacts) -> TrainingStep:
    """Weights, trained parameters with their gradients and optimizer state, activations (or the VAE
    encoding a batch, whichever is larger: the activations reuse the encoder's freed blocks), fixed costs."""
    weights = denoiser_weights(f) if f.quantized == "none" else quantized_weights(f)
    encoders, autoencoder = text_encoders(f), vae(f)
    parts = [*swapped_weights(f, weights), *encoders.resident]
    if f.full:
        trained = _full_trained_params(f) + encoders.trained_params
    else:
        trained = denoiser_lora_params(f) + encoders.trained_params
        parts.append(MemoryPart("trainable", "LoRA weights", trained * 4 / 2**20,
                                f"{trained / 1e6:,.1f} M parameters, fp32"))
    if autoencoder.resident:
        parts.append(MemoryPart("vae", "VAE", autoencoder.weights_mb,
                                f"{autoencoder.bytes * 8}-bit, encodes each batch"))
    parts += [gradients(f, trained), optimizer_state(f, trained)]
    parts += [p for p in (moving_average(f, trained),) if p is not None]
    parts += [p for p in (fp8_upcast_copies(f), quantized_working_copy(f), weight_copies(f)) if p is not None]
    parts += fsdp_parts(f)
    acts = activations(f)
    parts.append(acts)
    encode = autoencoder.encode_mb if autoencoder.resident else 0.0
    if encode > acts.mb:
        parts.append(MemoryPart("vae_encode", "VAE encoding (transient)", encode - acts.mb,
                                "larger than the activations at this size"))
    dynamic = max(acts.mb, encode)
    parts += [runtime_overhead(f)]
    if f.gpu:
        parts.append(allocator_slack(f, dynamic))
    step = TrainingStep(parts, encoders, autoencoder, trained, dynamic)
    for part in parts:
        step.by_key[part.key] = step.by_key.get(part.key, 0.0) + part.mb
    step.peak_mb = sum(p.mb for p in parts)
    return step


def _full_trained_params(f: RunFacts) -> int:
    return int(next(c for c in f.arch["components"].values() if c["role"] == "denoiser")["params"])


def denoiser_waits_for_caches(config: TrainConfig, sharded: bool) -> bool:
    """Whether the trainer keeps the denoiser in system memory until the caches are filled (so the caching
    phase holds the encoders and the VAE only): with a cache, unless the run is sharded (FSDP places the
    shards as it wraps them) or DreamBooth renders class images with the denoiser first. With
    model.blocks_to_swap it always waits there: its swapped blocks never come to the GPU whole. A base
    stored in fewer bits (model.quantized_base, model.fp8_base) always waits too, caches or none: it is
    narrowed there, or quantized from there onto the GPU, so the GPU never holds it at full width."""
    training, method, model = config.training, config.method, config.model
    if model.blocks_to_swap:
        return True
    if (model.quantized_base != "none" or model.fp8_base) and method.kind == "lora" and not sharded:
        return True
    if sharded or not (training.cache_text_embeddings or training.cache_latents):
        return False
    return not (method.kind == "dreambooth" and any(c.uses_prior_preservation for c in config.dataset.concepts))


def prompts_cached(config: TrainConfig) -> bool:
    """Whether the sample prompts are encoded with the cached captions (no encoder comes back for samples)."""
    return config.training.cache_text_embeddings and not config.method.train_text_encoder \
        and bool(config.sampling.prompts)


def caching_peak(f: RunFacts, step: TrainingStep) -> float:
    """Encoding latents and captions before training: every encoder in use (none with
    model.text_encoder_on_cpu) and the VAE, plus the larger encoder transient; the denoiser (weights and
    LoRA) only when it does not wait in system memory (a quantized base is quantized onto the GPU after)."""
    training, method = f.config.training, f.config.method
    transient = 0.0
    on_cpu = f.config.model.text_encoder_on_cpu  # the encoders embed in system memory
    if training.cache_text_embeddings and not method.train_text_encoder and not on_cpu:
        counted = float(f.arch["transients_mb"]["text_encoder_fp16"])
        transient = scaled(counted, f.side, f.side, f.batch, BYTES[f.frozen] * 2)  # counted in fp16
    if training.cache_latents:
        transient = max(transient, step.vae.encode_mb)
    if not (training.cache_text_embeddings or training.cache_latents):
        return 0.0
    loaded = (0.0 if on_cpu else step.encoders.all_mb) + step.vae.weights_mb
    if not denoiser_waits_for_caches(f.config, f.shards > 1):
        loaded += step.mb("weights") + step.mb("trainable")
    return step.mb("overhead") + loaded + transient * (1 + f.slack)
