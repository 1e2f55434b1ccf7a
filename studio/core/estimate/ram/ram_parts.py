"""One function per part of a training's system memory (RAM), in MiB, for the processes on one machine.

The parts follow what the trainer does (studio/train): every family loads its whole pipeline into
system memory with `from_pretrained` before each component moves to the GPU; with a cache the
denoiser waits in system memory while the caches fill (and is turned to fp8 or quantized there); cached latents
and caption embeddings are built on the CPU and stay there unless they fit a small share of the GPU; frozen
encoders and a VAE the steps no longer use are parked in system memory.
Sizes are the architectures' parameter counts (`resources/architectures/<family>.json`) and the
figures of `resources/architectures/ram.json` (the baseline, a worker, latent and embedding sizes).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studio.core.config.schema import TrainConfig
from studio.core.dataset.layouts import DatasetError
from studio.core.dataset.scan import list_concept
from studio.core.estimate.memory_data import BYTES, MB, denoiser_entry, read_resource_json
from studio.core.estimate.memory_parts import MemoryPart, RunFacts, vae_bytes
from studio.core.estimate.training_step import denoiser_waits_for_caches

GB = 1024.0


@functools.lru_cache(maxsize=1)
def load_ram_figures() -> dict[str, Any]:
    return read_resource_json("architectures", "ram.json")


@dataclass
class RamFacts:
    """What the RAM parts need: the run's facts, the machine's GPU memory and the dataset's size."""

    f: RunFacts
    figures: dict[str, Any]
    images: int  # instance and class images (one cached latent and caption each)
    gpu_total_mb: float  # 0 for a CPU run
    processes: int  # training processes on this machine (each holds its own copy of everything)

    @property
    def config(self) -> TrainConfig:
        return self.f.config

    @property
    def arch_name(self) -> str:
        size = self.f.arch.get("size")
        return f"{self.f.arch['family']}-{size}" if size else str(self.f.arch["family"])

    @property
    def waits(self) -> bool:
        """The denoiser waits in system memory while the caches fill (the trainer asks the same)."""
        return denoiser_waits_for_caches(self.config, self.f.shards > 1)

    def part(self, key: str, label: str, mb: float, detail: str, shared: bool = False) -> MemoryPart:
        """A part for every process on this machine (`shared`: pages of a file the processes map together)."""
        if shared and self.processes > 1:
            return MemoryPart(key, label, mb, f"{detail}; shared by the {self.processes} processes on this machine")
        if self.processes > 1:
            detail = f"{detail}; x{self.processes} processes on this machine"
        return MemoryPart(key, label, mb * self.processes, detail)


def _components(r: RamFacts) -> list[tuple[str, dict[str, Any]]]:
    """The components the trainer loads (SD3's T5 only with model.use_t5)."""
    return [(name, c) for name, c in r.f.arch["components"].items()
            if not (c["role"] == "text_encoder_t5" and not r.config.model.use_t5)]


def _load_bytes(r: RamFacts, comp: dict[str, Any]) -> int:
    """Bytes per weight of a component as `from_pretrained` leaves it in system memory."""
    f, method = r.f, r.config.method
    if comp["role"] == "vae":
        return 4  # loaded in fp32; its own dtype is set once it is on the GPU
    if f.full and (comp["role"] == "denoiser" or (method.train_text_encoder and "lora_targets" in comp)):
        return 4  # trained weights are fp32 from the start
    return BYTES[f.frozen]


def _file_bytes(r: RamFacts) -> int:
    """Bytes per weight of the base model's files (model.variant = "fp16" picks 16-bit files)."""
    if r.config.model.variant == "fp16":
        return 2
    return int(r.figures["file_bytes"].get(r.arch_name, 2))


def _copied(r: RamFacts, comp: dict[str, Any]) -> bool:
    """Whether loading makes a private copy of the component (another dtype than its file's); one in its
    file's dtype is mapped from the file instead (diffusers and transformers both do)."""
    return _load_bytes(r, comp) != _file_bytes(r)


def _mb(params: int, width: int) -> float:
    return params * width / MB


def baseline(r: RamFacts) -> MemoryPart:
    return r.part("baseline", "Python, torch and libraries", float(r.figures["baseline_mb"]),
                  "interpreter, torch with CUDA, diffusers, transformers (benchmarks/ram_baseline.py)")


def pipeline_load(r: RamFacts) -> MemoryPart | None:
    """`from_pretrained` loads the whole pipeline into system memory before any component moves to the GPU:
    the components converted to another dtype than their files' are private copies, all at once."""
    copied = [(c["class"], _mb(int(c["params"]), _load_bytes(r, c))) for _, c in _components(r) if _copied(r, c)]
    if not copied:
        return None
    names = ", ".join(name for name, _ in copied)
    return r.part("model_load", "Model loading (converted copies)", sum(mb for _, mb in copied),
                  f"the whole pipeline loads before it moves to the GPU; converted from {_file_bytes(r) * 8}-bit "
                  f"files: {names}")


def file_read(r: RamFacts) -> MemoryPart | None:
    """The largest component loaded in its file's dtype: mapped, its pages are read while it moves to the
    GPU (one component at a time; the system may drop them again)."""
    mapped = [(c["class"], _mb(int(c["params"]), _file_bytes(r))) for _, c in _components(r) if not _copied(r, c)]
    if not mapped:
        return None
    name, mb = max(mapped, key=lambda m: m[1])
    return r.part("file_read", "Largest model file being read", mb,
                  f"{name}, mapped from its safetensors file while it moves to the GPU", shared=True)


def denoiser_waiting(r: RamFacts) -> MemoryPart | None:
    """With a cache the denoiser waits in system memory until the caches are filled: a private fp8 copy
    once model.fp8_base has turned it (`fp8_conversion` counts the turning), a private copy when loading
    converted it, else mapped from its file (nothing the system cannot drop)."""
    if not r.waits:
        return None
    den = denoiser_entry(r.f.arch)
    if r.f.fp8:
        return r.part("denoiser", f"{den['class']} waiting (fp8)", _mb(int(den["params"]), 1),
                      "model.fp8_base: an 8-bit copy in system memory while the caches fill")
    if not _copied(r, den):
        return None
    width = _load_bytes(r, den)
    return r.part("denoiser", f"{den['class']} waiting", _mb(int(den["params"]), width),
                  f"{'fp32' if width == 4 else r.f.frozen}, in system memory while the caches fill")


def fp8_conversion(r: RamFacts) -> MemoryPart | None:
    """model.fp8_base turns the waiting denoiser to fp8 layer by layer in system memory: its 8-bit copy
    grows to the whole denoiser, with two fp32 copies of the largest layer at a time
    (studio/train/memory/fp8.py). On the GPU it costs no RAM."""
    if not (r.f.fp8 and r.waits):
        return None
    den = denoiser_entry(r.f.arch)
    largest, params = int(den["largest_layer_params"]), int(den["params"])
    # Each layer's old weight is freed once its 8-bit copy is made: a converted copy shrinks as the fp8 one grows.
    old = _mb(params, _load_bytes(r, den)) if _copied(r, den) else 0.0
    return r.part("fp8_conversion", "Turning the denoiser to fp8", max(old, _mb(params, 1)) + _mb(largest, 8),
                  "the 8-bit copy, and the largest layer widened to fp32 and scaled, one layer at a time")


def quantized_conversion(r: RamFacts) -> MemoryPart | None:
    """model.quantized_base quantizes the waiting denoiser layer by layer onto the GPU once the caches are
    filled: the copy loading converted (or the file's pages, read a layer at a time), and one layer widened
    to fp32 while it is quantized (studio/train/memory/quantized.py). A CPU run keeps the quantized layers
    in system memory besides."""
    if r.f.quantized == "none" or not r.waits:
        return None
    from studio.core.estimate.quantized_parts import stored_denoiser_mb

    den = denoiser_entry(r.f.arch)
    params, largest = int(den["params"]), int(den["largest_layer_params"])
    old = _mb(params, _load_bytes(r, den)) if _copied(r, den) else 0.0
    on_cpu = stored_denoiser_mb(r.f, 0) if r.gpu_total_mb == 0 else 0.0
    where = "the GPU" if r.gpu_total_mb else "system memory"
    return r.part("quantized_conversion", f"Quantizing the denoiser to {r.f.quantized}", old + on_cpu + _mb(largest, 4),
                  f"layer by layer into {where}, from the denoiser as loaded; one layer widened while it is quantized")


def encoders_mb(r: RamFacts) -> float:
    return sum(_mb(int(c["params"]), _load_bytes(r, c)) for _, c in _components(r)
               if c["role"].startswith("text_encoder"))


def encoders_on_cpu(r: RamFacts) -> MemoryPart | None:
    """model.text_encoder_on_cpu: the encoders live and embed in system memory."""
    if not r.config.model.text_encoder_on_cpu:
        return None
    return r.part("text_encoders", "Text encoders on the CPU", encoders_mb(r),
                  "model.text_encoder_on_cpu: all of their weights are read for every batch of captions")


def idle_encoders_on_cpu(r: RamFacts) -> MemoryPart | None:
    """model.text_encoder_on_cpu while the encoders do not embed: never moved, so mapped from their files
    (nothing the system cannot drop) unless loading converted them."""
    if not r.config.model.text_encoder_on_cpu:
        return None
    copied = sum(_mb(int(c["params"]), _load_bytes(r, c)) for _, c in _components(r)
                 if c["role"].startswith("text_encoder") and _copied(r, c))
    return r.part("text_encoders", "Text encoders on the CPU", copied, "converted copies, idle") if copied else None


def parked_encoders(r: RamFacts) -> MemoryPart | None:
    """Frozen encoders wait in system memory between sample images once the captions are cached (or live
    there with model.text_encoder_on_cpu)."""
    config = r.config
    if config.model.text_encoder_on_cpu:
        return idle_encoders_on_cpu(r)
    if not config.training.cache_text_embeddings or config.method.train_text_encoder:
        return None
    return r.part("text_encoders", "Text encoders (parked)", encoders_mb(r),
                  "frozen, copied off the GPU once the captions are cached")


def parked_vae(r: RamFacts) -> MemoryPart | None:
    """With cached latents the VAE waits in system memory until sample images are decoded."""
    if not r.config.training.cache_latents:
        return None
    comp = r.f.arch["components"]["vae"]
    width = vae_bytes(r.config, r.f.frozen)
    return r.part("vae", "VAE (parked)", _mb(int(comp["params"]), width),
                  f"{width * 8}-bit, copied off the GPU once the latents are cached")


def latent_cache_mb(r: RamFacts) -> float:
    """fp32 latents of every image at the training size (buckets keep about the same area)."""
    scale = int(r.figures["latent_downscale"].get(r.arch_name, 8))
    return r.images * int(r.f.arch["latent_channels"]) * (r.f.side // scale) ** 2 * 4 / MB


def _gpu_cache_mb(r: RamFacts) -> float:
    """The share of the GPU the trainer keeps cached latents and caption embeddings in (0 for a CPU run)."""
    return r.gpu_total_mb * float(r.figures["gpu_latent_fraction"])


def _latents_on_gpu(r: RamFacts) -> bool:
    return r.config.training.cache_latents and r.images > 0 and latent_cache_mb(r) <= _gpu_cache_mb(r)


def latent_cache(r: RamFacts, training: bool) -> MemoryPart | None:
    """training.cache_latents: built in system memory; while training it stays there unless it fits the
    trainer's small share of the GPU (on disk too with cache_latents_to_disk, still read into memory)."""
    if not r.config.training.cache_latents or r.images == 0:
        return None
    if training and _latents_on_gpu(r):
        return None  # moved to the GPU once filled
    return r.part("latent_cache", "Latent cache", latent_cache_mb(r),
                  f"{r.images} images at {r.f.side} px, fp32 (kept in memory even when also written to disk)")


def text_cache(r: RamFacts, training: bool) -> MemoryPart | None:
    """training.cache_text_embeddings: built in system memory; while training it stays there unless it fits the
    share of the GPU the cached latents leave (data/caching_phase.py, offload_frozen)."""
    config = r.config
    if not config.training.cache_text_embeddings or r.images == 0:
        return None
    floats = int(r.figures["text_embedding_floats"].get(r.arch_name, 0))
    if config.model.use_t5:
        floats += int(r.figures["t5_embedding_floats"])
    width = BYTES[r.f.frozen]
    mb = r.images * floats * width / MB
    if training and mb <= _gpu_cache_mb(r) - (latent_cache_mb(r) if _latents_on_gpu(r) else 0.0):
        return None  # moved to the GPU once filled
    return r.part("text_cache", "Text-embedding cache", mb, f"{r.images} captions, {floats * width / MB:.1f} MB each")


def ema_on_cpu(r: RamFacts, trained_params: int) -> MemoryPart | None:
    training = r.config.training
    if not (training.ema and training.ema_on_cpu):
        return None
    return r.part("ema", "EMA in system memory", _mb(trained_params, 4), "training.ema_on_cpu, fp32")


def dataloader_workers(r: RamFacts) -> MemoryPart | None:
    """training.dataloader_workers: each a process of its own, a couple of decoded batches ahead."""
    workers = r.config.training.dataloader_workers
    if workers == 0:
        return None
    batches = int(r.figures["worker_prefetch_batches"]) * r.f.batch * 3 * r.f.side ** 2 * 4 / MB
    each = float(r.figures["worker_mb"]) + batches
    return r.part("workers", "Data-loading workers", workers * each,
                  f"{workers} x {each / GB:.2f} GB (a process with torch, {r.figures['worker_prefetch_batches']} "
                  "decoded batches ahead)")


def checkpoint_save(r: RamFacts, trained_params: int) -> MemoryPart | None:
    """A checkpoint's weights are gathered into system memory to be written (a full fine-tune's are large)."""
    mb = _mb(trained_params, 4) * (2 if r.config.training.ema else 1)
    if mb < 64:
        return None
    return MemoryPart("checkpoint", "Saving a checkpoint (transient)", mb,
                      "the trained weights, fp32, copied to be written (once for the whole run)")


def cpu_training_step(r: RamFacts, step_mb: float) -> MemoryPart | None:
    """A CPU run trains in system memory: the step's own figure (the VRAM estimate's CPU peak)."""
    if r.f.gpu:
        return None
    return r.part("cpu_step", "Training step on the CPU", step_mb, "weights, gradients, optimizer and activations")


_COUNTED: dict[tuple[str, str, int], int] = {}  # (folder, caption source, its mtime) -> images: listed once


def _folder_images(concept: Any, stamp: int) -> int:
    key = (concept.path, concept.caption_source, stamp)
    if key not in _COUNTED:
        if len(_COUNTED) > 256:  # folders edited over a long session: start again
            _COUNTED.clear()
        try:
            _COUNTED[key] = len(list_concept(concept).paths)
        except (DatasetError, OSError):
            _COUNTED[key] = 0
    return _COUNTED[key]


def dataset_images(config: TrainConfig) -> int:
    """Instance and class images of `config` (its paths resolved); a folder that cannot be read counts none."""
    total = 0
    for concept in config.dataset.concepts:
        try:
            stamp = Path(concept.path).stat().st_mtime_ns
        except OSError:
            continue
        total += _folder_images(concept, stamp)
        if concept.uses_prior_preservation:
            total += concept.num_class_images
    return total
