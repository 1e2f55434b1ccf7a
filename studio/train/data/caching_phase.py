"""The caching phase: the captions' and the sample prompts' embeddings and the latents are made before the
denoiser comes to the GPU.

With cached text the frozen text encoders are used only while the caches fill, so the caching phase
holds the encoders and the VAE, never the denoiser beside them: the denoiser is loaded into system
memory (`FamilyAdapter.denoiser_home`) and moved to the training device once the encoders and the VAE
have left it. The sample prompts are encoded with the captions, so samples bring back no encoder
(a FLUX.2 [klein] run's 7.5 GB Qwen3 never meets its transformer on the GPU). Nothing here draws
from the training's random generators and the frozen encoders give the same embeddings now as later:
a run trains and samples the same as one that encodes as it goes. With model.text_encoder_on_cpu the
encoders never come to the GPU at all: they were loaded into system memory and embed there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from studio.core.config.prompt_options import sample_draws
from studio.core.config.schema import TrainConfig
from studio.core.estimate.training_step import denoiser_waits_for_caches, prompts_cached
from studio.core.families import family
from studio.train.components import Components
from studio.train.data.cache import LatentCache, TextCache, cache_captions, gpu_cache_budget
from studio.train.families.base import Conditioning, FamilyAdapter
from studio.train.memory.block_swap import swap_frozen_blocks, swapped_blocks
from studio.train.memory.quantized import quantize_base

HOLD_DEVICE = torch.device("cpu")  # where the denoiser waits while the caches fill


def holds_denoiser(config: TrainConfig, sharded: bool) -> bool:
    """Whether the denoiser waits off the GPU until the caches are filled (the estimate asks the same)."""
    return denoiser_waits_for_caches(config, sharded)


def encode_sample_prompts(
    adapter: FamilyAdapter, components: Components, config: TrainConfig, device: torch.device,
    controls: Sequence[Path] = (),
) -> dict[tuple[Any, ...], Conditioning]:
    """Each sample prompt's embeddings (and its negative prompt's), by samples.embedding_key, as the
    samples' encoding stage makes them (with the `controls` edit samples edit), on `device` (where the denoiser
    samples; encoders kept on the CPU embed there)."""
    from studio.train.samples import EmbeddingKey, embedding_key, evaluating, on_device, sample_references

    if not prompts_cached(config):
        return {}
    pipeline = adapter.make_pipeline(components)
    pipeline.encode_prompt = encoding_once(pipeline.encode_prompt)
    draws = sample_draws(config.sampling, config.dataset.resolution, family(config.model.family).pixel_multiple)
    embedded: dict[EmbeddingKey, Conditioning] = {}
    with torch.no_grad(), evaluating(components):
        for draw in draws:
            # Edit samples: a prompt whose encoder sees the controls is embedded with them, at its picture's size.
            text = embedding_key(draw.text, draw.negative, (draw.width, draw.height) if controls else None)
            if text in embedded:
                continue
            references = sample_references(config, controls, draw.width, draw.height) if controls else []
            made = adapter.sample_edit_conditioning(pipeline, draw.text, draw.negative, references)
            embedded[text] = {key: on_device(value, device) for key, value in made.items()}
    return embedded


def encoding_once(encode: Callable[..., Any]) -> Callable[..., Any]:
    """A pipeline's `encode_prompt` that encodes each text once: FLUX.2 [klein] and Qwen-Image embed the
    negative prompt apart from each sample prompt, and an encoder on the CPU (model.text_encoder_on_cpu) takes
    seconds a text. Calls whose arguments cannot be told apart by value (an edit's control image) encode."""
    made: dict[Any, Any] = {}

    def encode_once(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items(), key=lambda item: item[0])))
        try:
            if key in made:
                return made[key]
        except TypeError:  # an unhashable argument
            return encode(*args, **kwargs)
        made[key] = encode(*args, **kwargs)
        return made[key]

    return encode_once


def text_phase(components: Any, device: Any) -> str:
    """The name the text encoding's time goes under: a GPU run's encoders kept in system memory encode on the CPU."""
    import torch

    homes = {p.device.type for encoder in components.text_encoders for p in list(encoder.parameters())[:1]}
    return "text encoding (CPU)" if homes == {"cpu"} and torch.device(device).type != "cpu" else "text encoding"


def fill_caches(trainer: Any) -> tuple[LatentCache | None, TextCache | None]:
    """The latents and the captions' embeddings (as the config asks), and the sample prompts' with them."""
    acc, config = trainer.accelerator, trainer.config
    training = config.training
    latent_cache, text_cache = None, None
    if training.cache_latents:
        disk = trainer.run_dir / "cache" / "latents" if training.cache_latents_to_disk else None
        latent_cache = LatentCache()
        if disk is not None and not acc.is_local_main_process:
            acc.wait_for_everyone()  # the local main process writes the files first
        with trainer.clock.timed("caching latents"):
            latent_cache.fill(trainer.adapter, trainer.components, trainer.items, config.dataset,
                              training.batch_size, disk, acc.is_local_main_process, trainer.reporter.phase)
        if disk is not None and acc.is_local_main_process:
            acc.wait_for_everyone()
    if training.cache_text_embeddings:
        text_cache = TextCache()
        with trainer.clock.timed(text_phase(trainer.components, acc.device)):
            if trainer.adapter.prompt_sees_controls and any(item.controls for item in trainer.items):
                text_cache.fill_edit_pairs(trainer.adapter, trainer.components, trainer.items, config.dataset,
                                           training.batch_size, trainer.reporter.phase)
            else:
                text_cache.fill(trainer.adapter, trainer.components, cache_captions(trainer.items, config.dataset),
                                training.batch_size, trainer.reporter.phase)
            trainer.sampling_plan.embedded = encode_sample_prompts(trainer.adapter, trainer.components, config,
                                                                   acc.device, trainer.sampling_plan.controls)
    return latent_cache, text_cache


def offload_frozen(trainer: Any) -> None:
    """After caching, what the steps no longer use leaves the GPU until samples need it; then the denoiser's
    layers are quantized onto it (model.quantized_base), the denoiser comes (when it waited in system memory)
    and the latents and the captions' embeddings join it if they fit."""
    trained = {id(module) for module in trainer.train_modules}
    components, offload = trainer.components, trainer.offload
    if trainer.latent_cache is not None:
        offload.add("vae", components.vae)
    if trainer.text_cache is not None:
        for index, encoder in enumerate(components.text_encoders):
            if id(encoder) not in trained:
                offload.add(f"text_encoder_{index + 1}", encoder)
    offload.offload()
    device = trainer.accelerator.device
    kind = trainer.config.model.quantized_base
    if kind != "none":  # onto the GPU the encoders and the VAE have left; swapped blocks' layers come back
        with trainer.clock.timed(f"{kind} conversion"):
            quantize_base(components.denoiser, kind, trainer.dtype, device,
                          swapped_blocks(trainer.config, components.denoiser))
    if trainer.adapter.denoiser_home is not None:  # it waited in system memory while the caches filled
        # Its swapped blocks' frozen weights stay there (model.blocks_to_swap); the rest comes.
        trainer.block_swap = swap_frozen_blocks(trainer.config, components.denoiser, device)
        components.denoiser.to(device)
    budget = gpu_cache_budget(device)  # the latents first, the captions' embeddings in what they leave
    if trainer.latent_cache is not None and trainer.latent_cache.keep_on(device, budget):
        budget -= trainer.latent_cache.nbytes()
    if trainer.text_cache is not None:
        trainer.text_cache.keep_on(device, budget)
