"""Changes that make a config fit a GPU, cheapest in quality first."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, overload

from pydantic import ValidationError

from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.rules.swap_rules import published_blocks
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import Fit, VramEstimate, estimate_vram, fit
from studio.core.estimate.sampling_plan import samples_on
from studio.core.families import family
from studio.core.hardware.report import GPUInfo

RESOLUTIONS = (1536, 1280, 1024, 896, 768, 640, 512, 448, 384, 320, 256)
MIN_RANK = 4


@dataclass
class Suggestion:
    """One step; `changes` are dotted config keys -> values, applied on top of the previous steps."""

    key: str
    title: str
    description: str
    changes: dict[str, Any]
    estimate: VramEstimate
    fit: Fit
    saved_mb: float = 0.0
    notes: list[str] = field(default_factory=list)


@overload
def apply_changes(config: ResolvedConfig, changes: dict[str, Any]) -> ResolvedConfig: ...
@overload
def apply_changes(config: TrainConfig, changes: dict[str, Any]) -> TrainConfig: ...
def apply_changes(config: TrainConfig, changes: dict[str, Any]) -> TrainConfig:
    """A validated copy of `config` with dotted keys set (raises pydantic's ValidationError); a resolved
    config stays resolved against its folder."""
    data = config.model_dump()
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        if leaf not in node:
            raise KeyError(f"unknown config key {dotted}")
        node[leaf] = value
    changed = TrainConfig.model_validate(data)
    return config.varied(changed) if isinstance(config, ResolvedConfig) else changed


def _halvings(value: int, floor: int) -> Iterator[int]:
    while value // 2 >= floor:
        value //= 2
        yield value


Step = Callable[[TrainConfig], Iterator[tuple[dict[str, Any], str]]]


def _cache_text(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if not c.training.cache_text_embeddings and not c.method.train_text_encoder and not c.dataset.shuffle_tags:
        yield ({"training.cache_text_embeddings": True},
               "Encode the captions once before training and free the text encoders. No quality cost.")


def _cache_latents(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if not c.training.cache_latents and not c.dataset.flip and c.dataset.crop != "random":
        yield ({"training.cache_latents": True},
               "Encode the images once before training and free the VAE. No quality cost.")


def _drop_t5(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if c.model.use_t5:  # validation allows it only for the families that have a T5
        yield ({"model.use_t5": False},
               "Train without the 4.7 B-parameter T5 encoder (CLIP only); long prompts follow less closely.")


def _checkpointing(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if not c.training.gradient_checkpointing:
        yield ({"training.gradient_checkpointing": True},
               "Recompute activations during the backward pass: much less memory, about 20-30% slower steps.")


def _shard(gpus: int) -> Step:
    """Split a full fine-tune's trained state across the machine's GPUs (launch.strategy = "fsdp")."""

    def step(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
        processes = max(gpus, c.launch.num_processes)
        if c.method.kind == "dreambooth" and c.launch.strategy != "fsdp" and processes > 1:
            yield ({"launch.strategy": "fsdp", "launch.num_processes": processes},
                   f"Split the trained weights, their gradients and the optimizer state across the {processes} "
                   f"GPUs (FSDP): each holds 1/{processes} of them. No quality cost; the GPUs trade weights "
                   "every step.")

    return step


def _adam8bit(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    # AdamW only: Prodigy's learning rate (1.0) multiplies the step size it finds, and 8-bit AdamW would
    # take it as the step size itself (a run that diverges at once).
    if c.training.optimizer == "adamw" and not c.launch.cpu:
        yield ({"training.optimizer": "adamw8bit"},
               "Keep the optimizer state in 8 bits (bitsandbytes): a quarter of AdamW's memory, "
               "results very close.")


def _fp8_base(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if c.method.kind == "lora" and not c.model.fp8_base and not c.launch.cpu:
        yield ({"model.fp8_base": True},
               "Keep the frozen base model in 8-bit floats, widened layer by layer while it runs: about half "
               "its memory, a small quality cost.")


def _block_swap(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    """A quarter, half, three quarters, then all but two of the denoiser's blocks kept in system memory."""
    blocks = published_blocks(family(c.model.family).architecture(c.model.base))
    if c.method.kind != "lora" or c.launch.cpu or not blocks:
        return  # validation refuses it for the families and methods it does not act for
    for count in sorted({blocks // 4, blocks // 2, 3 * blocks // 4, blocks - 2}):
        if count > c.model.blocks_to_swap:
            yield ({"model.blocks_to_swap": count},
                   f"Keep the frozen weights of {count} of the {blocks} transformer blocks in system memory and "
                   "copy each to the GPU just ahead of use: no quality cost, slower steps (the estimate notes the "
                   "copies' time) and as much more RAM.")


def _nf4_base(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if c.method.kind == "lora" and c.model.quantized_base != "nf4" and not c.launch.cpu and not c.method.use_dora \
            and c.method.network not in ("loha", "lokr"):
        yield ({"model.fp8_base": False, "model.quantized_base": "nf4"},
               "Keep the frozen base model's linear layers in 4 bits (nf4, bitsandbytes): about a quarter of "
               "its bf16 memory, a larger quality cost than 8 bits.")


def _tiled_samples(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if samples_on(c) and c.sampling.vae_tiling != "on":
        yield ({"sampling.vae_tiling": "on"},
               "Decode sample images tile by tile: the VAE needs a fraction of the memory; samples take a "
               "little longer.")


def _batch(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    t = c.training
    effective = t.effective_batch()
    for batch in _halvings(t.batch_size, 1):
        accumulation = max(1, effective // batch)
        yield ({"training.batch_size": batch, "training.gradient_accumulation": accumulation},
               f"Batch {batch} with {accumulation} accumulation steps keeps {batch * accumulation} images "
               "per update; steps take longer.")


def _rank(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if c.method.kind != "lora":
        return
    for rank in _halvings(c.method.rank, MIN_RANK):
        yield ({"method.rank": rank}, f"A rank-{rank} LoRA: fewer trained parameters, less detail learned.")


def _resolution(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    for res in RESOLUTIONS:
        if res < c.dataset.resolution and res >= 256:
            yield ({"dataset.resolution": res}, f"Train at {res} px: less detail than the model's native size.")


def _to_lora(c: TrainConfig) -> Iterator[tuple[dict[str, Any], str]]:
    if c.method.kind == "dreambooth":
        yield ({"method.kind": "lora"},
               "Train a LoRA instead of the whole model: a small adapter, a fraction of the memory.")


# In order of quality cost: free first, then slower, then lower quality.
STEPS: list[tuple[str, str, Step]] = [
    ("cache_text_embeddings", "Cache text embeddings", _cache_text),
    ("cache_latents", "Cache latents", _cache_latents),
    ("vae_tiling", "Decode samples in tiles", _tiled_samples),
    ("gradient_checkpointing", "Gradient checkpointing", _checkpointing),
    ("adamw8bit", "8-bit Adam", _adam8bit),
    ("fp8_base", "fp8 base weights", _fp8_base),
    ("blocks_to_swap", "Swap blocks to system memory", _block_swap),
    ("batch", "Smaller batch, more accumulation", _batch),
    ("use_t5", "Drop the T5 text encoder", _drop_t5),
    ("nf4_base", "4-bit base weights", _nf4_base),
    ("rank", "Lower LoRA rank", _rank),
    ("resolution", "Lower resolution", _resolution),
    ("method", "LoRA instead of a full fine-tune", _to_lora),
]


# Steps that cost quality; dropped again when a later step made them unnecessary.
COSTLY = frozenset({"adamw8bit", "fp8_base", "batch", "use_t5", "nf4_base", "rank", "resolution"})


def steps_for(gpus: int) -> list[tuple[str, str, Step]]:
    """STEPS, with sharding across the GPUs (free in quality, unlike what follows it) on a machine with several."""
    if gpus < 2:
        return STEPS
    at = next(i for i, (key, _title, _step) in enumerate(STEPS) if key == "gradient_checkpointing")
    return [*STEPS[:at], ("shard", f"Shard across {gpus} GPUs", _shard(gpus)), *STEPS[at:]]


def suggest_fixes(config: ResolvedConfig, gpu: GPUInfo | None, gpus: int = 1) -> list[Suggestion]:
    """Cumulative steps toward a fit on one of `gpus` GPUs like `gpu`, stopping at the first that fits;
    [] when it already fits.

    Graded steps (batch, rank, resolution) take the mildest value that fits, or
    the strongest one when none does. When the list ends without a fit, no
    combination of these changes fits this GPU.
    """
    original = config
    current = estimate_vram(config, gpu)
    if gpu is None or fit(current, gpu) != "does_not_fit":
        return []
    out: list[Suggestion] = []
    for key, title, step in steps_for(max(gpus, config.launch.num_processes)):
        best: tuple[dict[str, Any], str, ResolvedConfig, VramEstimate] | None = None
        for changes, description in step(config):
            try:
                candidate = apply_changes(config, changes)
            except (ValidationError, KeyError):
                continue
            estimate = estimate_vram(candidate, gpu)
            if estimate.total_mb >= current.total_mb:
                continue
            best = (changes, description, candidate, estimate)
            if fit(estimate, gpu) != "does_not_fit":
                break
        if best is None:
            continue
        changes, description, config, estimate = best
        out.append(Suggestion(key=key, title=title, description=description, changes=changes,
                              estimate=estimate, fit=fit(estimate, gpu),
                              saved_mb=current.total_mb - estimate.total_mb))
        current = estimate
        if out[-1].fit != "does_not_fit":
            break
    return _prune(original, out, gpu)


def _prune(original: ResolvedConfig, steps: list[Suggestion], gpu: GPUInfo) -> list[Suggestion]:
    """Drop earlier steps a later, stronger one made unnecessary (costliest first), then re-estimate."""
    if not steps or steps[-1].fit == "does_not_fit":
        return steps
    kept = list(steps)
    for candidate in reversed(steps[:-1]):
        if candidate.key not in COSTLY:
            continue  # free steps stay: they cost nothing and leave more room
        trial = [s for s in kept if s is not candidate]
        try:
            config = apply_suggestions(original, trial)
        except (ValidationError, KeyError):
            continue
        if fit(estimate_vram(config, gpu), gpu) != "does_not_fit":
            kept = trial
    config, previous = original, estimate_vram(original, gpu)
    for s in kept:
        config = apply_changes(config, s.changes)
        s.estimate = estimate_vram(config, gpu)
        s.fit, s.saved_mb = fit(s.estimate, gpu), previous.total_mb - s.estimate.total_mb
        previous = s.estimate
    return kept


@overload
def apply_suggestions(config: ResolvedConfig, suggestions: list[Suggestion],
                      upto: int | None = None) -> ResolvedConfig: ...
@overload
def apply_suggestions(config: TrainConfig, suggestions: list[Suggestion], upto: int | None = None) -> TrainConfig: ...
def apply_suggestions(config: TrainConfig, suggestions: list[Suggestion], upto: int | None = None) -> TrainConfig:
    """The config with suggestions[0..upto] applied (all by default)."""
    for suggestion in suggestions[: None if upto is None else upto + 1]:
        config = apply_changes(config, suggestion.changes)
    return config
