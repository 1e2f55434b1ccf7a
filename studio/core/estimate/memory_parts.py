"""One function per part of a training step's memory on one device, and the step they make.

Every part is in MiB. On a GPU the figure is what nvidia-smi shows for the trainer
(the CUDA context plus the caching allocator's reserved pool), fitted to measured
NVML peaks (`resources/architectures/gpu_peaks.json`); on the CPU it is peak RSS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from studio.core.config.rules.sharding import sharded
from studio.core.config.schema import TrainConfig
from studio.core.config.weight_dtype import resolved_weight_dtype
from studio.core.estimate.local_architecture import local_architecture
from studio.core.estimate.memory_data import (
    BYTES,
    MB,
    denoiser_entry,
    load_architecture,
    load_calibration,
    lora_params,
    scaled,
)
from studio.core.families import family


@dataclass
class MemoryPart:
    key: str
    label: str
    mb: float
    detail: str = ""


@dataclass
class RunFacts:
    """What the parts need to know about a config on a device, worked out once."""

    config: TrainConfig
    device: str  # gpu | cpu
    arch: dict[str, Any]
    calibration: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def gpu(self) -> bool:
        return self.device == "gpu"

    @property
    def full(self) -> bool:
        return self.config.method.kind == "dreambooth"

    @cached_property
    def frozen(self) -> str:
        """The frozen weights' dtype: the config's on a GPU, fp32 on the CPU."""
        return resolved_weight_dtype(self.config) if self.gpu else "fp32"

    @cached_property
    def fp8(self) -> bool:
        """LoRA over a frozen denoiser kept in fp8 (a CPU run keeps its weights as they are)."""
        return self.config.model.fp8_base and self.gpu and not self.full

    @cached_property
    def quantized(self) -> str:
        """model.quantized_base under a LoRA: none, int8 or nf4 (the trainer quantizes on the CPU as well)."""
        return "none" if self.full else self.config.model.quantized_base

    @property
    def batch(self) -> int:
        """Images per step on one GPU: class images of prior preservation take their places in the batches
        beside the instance images (studio/train/data/batches.py), they do not add to them."""
        return self.config.training.batch_size

    @cached_property
    def shards(self) -> int:
        """How many ways the trained weights, gradients and optimizer state are split (launch.strategy fsdp)."""
        return self.config.launch.num_processes if sharded(self.config) else 1

    @property
    def side(self) -> int:
        return self.config.dataset.resolution

    @property
    def native(self) -> int:
        return int(self.arch["native_resolution"])

    @cached_property
    def device_calibration(self) -> dict[str, Any]:
        return self.calibration[self.device]

    @cached_property
    def slack(self) -> float:
        """The caching allocator's share over what a transient holds (none on the CPU)."""
        return float(self.calibration["gpu"]["allocator_fraction"]) if self.gpu else 0.0

    def factor(self, name: str) -> float:
        """A measured ratio of this device's peak to the meta-device count (1 where none is measured)."""
        return float(self.device_calibration.get(name, 1.0))


def run_facts(config: TrainConfig, device: str, calibration: dict[str, Any] | None = None) -> RunFacts:
    """The facts of `config` on `device`; `calibration` replaces the shipped one (fitting it)."""
    arch = local_architecture(load_architecture(family(config.model.family).architecture(config.model.base)),
                              config.model.base)
    facts = RunFacts(config, device, arch, calibration or load_calibration())
    if "local_model" in arch:
        local = arch["local_model"]
        facts.notes.append(f"sized for {local['name']}: {local['denoiser_params'] / 1e6:,.1f} M denoiser parameters "
                           f"(the full-size {config.model.family} has {local['published_params'] / 1e6:,.0f} M)")
    provisional = [k for k in facts.calibration.get("fit", {}).get("provisional", {}) if k.startswith(f"{device}.")]
    if provisional:  # a number that rests on one measured run
        facts.notes.append(f"provisional: the {device.upper()} figures ({', '.join(k.split('.', 1)[1] for k in provisional)}) "
                           "rest on one measured run each")
    return facts


def denoiser_weights(f: RunFacts) -> MemoryPart:
    """The denoiser: fp32 when fully trained, else frozen in the weights' dtype (or fp8; a quantized base's
    is `quantized_parts.quantized_weights`)."""
    den = denoiser_entry(f.arch)
    params, buffers = int(den["params"]), int(den.get("float_buffers", 0))
    label = f"{den['class']} weights"
    if f.full:
        shard = f", 1/{f.shards} on each GPU (sharded)" if f.shards > 1 else ""
        return MemoryPart("weights", label, (params / f.shards + buffers) * 4 / MB,
                          f"{params / 1e6:,.0f} M parameters, fp32 (trained){shard}")
    if f.fp8:  # buffers (SD3's position table) keep the weights' dtype
        return MemoryPart("weights", label, (params + buffers * BYTES[f.frozen]) / MB,
                          f"{params / 1e6:,.0f} M parameters, fp8 e4m3 (frozen)")
    # Floating buffers (SD3's position-embedding table) sit on the GPU in the weights' dtype.
    return MemoryPart("weights", label, (params + buffers) * BYTES[f.frozen] / MB,
                      f"{params / 1e6:,.0f} M parameters, {f.frozen} (frozen)")


def fp8_upcast_copies(f: RunFacts) -> MemoryPart | None:
    """fp8 weights are widened to the training precision layer by layer; autograd keeps the wide
    copy of every layer whose activations it keeps (the layers outside checkpointed blocks)."""
    if not f.fp8:
        return None
    den, training = denoiser_entry(f.arch), f.config.training
    wide = BYTES[f.frozen]
    kept = 1.0 - _checkpointed_share(f) if training.gradient_checkpointing else 1.0
    mb = (int(den["largest_layer_params"]) + kept * int(den["params"])) * wide / MB
    kept_text = f", and {kept:.0%} of the layers kept for backward" if kept else ""
    return MemoryPart("fp8_upcast", "fp8 layers widened to run", mb, f"{f.frozen} copies: one layer{kept_text}")


def denoiser_lora_params(f: RunFacts) -> int:
    den, method = denoiser_entry(f.arch), f.config.method
    count = lora_params(den["lora_targets"], method.rank, method.use_dora, method.network, method.lokr_factor)
    if method.network == "locon" or method.conv_rank is not None:
        f.notes.append("the adapter on the convolution layers is not counted (a few MB at the usual conv ranks)")
    if method.blocks and den.get("blocks"):
        count = count * len(set(method.blocks)) // int(den["blocks"])
    if method.target_modules:
        f.notes.append("custom LoRA target modules: the estimate assumes the family's attention projections")
    return count


@dataclass
class TextEncoders:
    resident: list[MemoryPart]  # on the device during the training steps
    all_mb: float  # every encoder in use, in the frozen dtype (caching and sampling bring them)
    trained_params: int

    @property
    def resident_mb(self) -> float:
        return sum(p.mb for p in self.resident)


def text_encoders(f: RunFacts) -> TextEncoders:
    """The text encoders in use: trained ones are resident, frozen ones leave with cached embeddings."""
    config, method = f.config, f.config.method
    out = TextEncoders([], 0.0, 0)
    for name, comp in f.arch["components"].items():
        if not comp["role"].startswith("text_encoder"):
            continue
        if comp["role"] == "text_encoder_t5" and not config.model.use_t5:
            continue
        params = int(comp["params"])
        size = params * BYTES[f.frozen] / MB
        out.all_mb += size
        if method.train_text_encoder and "lora_targets" in comp:
            if f.full:
                out.trained_params += params
                size = params * 4 / MB / f.shards
            else:
                out.trained_params += lora_params(comp["lora_targets"], method.text_encoder_rank or method.rank,
                                                  method.use_dora, method.network, method.lokr_factor)
        elif config.training.cache_text_embeddings:
            continue  # encoded once before training, then moved off the GPU
        out.resident.append(MemoryPart("text_encoders", name, size, comp["class"]))
    return out


@dataclass
class Vae:
    weights_mb: float
    bytes: int  # per weight and activation
    encode_mb: float  # the encoder's transient for one batch at the training size
    resident: bool  # on the device during the steps (latents encoded each step)


def vae_bytes(config: TrainConfig, frozen: str) -> int:
    """Bytes per VAE weight and activation as the trainers keep it.

    The SD1.5, SDXL and SD3 VAEs overflow in fp16, so with fp16 weights the VAE
    stays in fp32 unless a separate fp16-safe VAE is given (SDXL:
    madebyollin/sdxl-vae-fp16-fix). bf16 does not overflow.
    """
    if frozen != "fp16":
        return BYTES[frozen]
    return 2 if family(config.model.family).separate_vae_fp16_safe and config.model.vae is not None else 4


def vae(f: RunFacts) -> Vae:
    """The VAE and its encoder's peak (counted on the meta device, scaled by what a GPU measured)."""
    comp = f.arch["components"]["vae"]
    width = vae_bytes(f.config, f.frozen)
    counted = float(f.arch["transients_mb"]["vae_encode_fp32"])
    encode = scaled(counted, f.side, f.native, f.batch, width) * f.factor("vae_encode_factor")
    return Vae(int(comp["params"]) * width / MB, width, encode, not f.config.training.cache_latents)


def gradients(f: RunFacts, trained: int) -> MemoryPart:
    mb = trained * 4 / MB
    if f.shards > 1:
        return MemoryPart("gradients", "Gradients", mb / f.shards, f"fp32, 1/{f.shards} on each GPU (sharded)")
    if f.config.launch.num_processes > 1:
        mb *= 2  # DDP keeps a bucket copy of every gradient
        f.notes.append("multi-GPU: gradients are counted twice (DDP communication buckets)")
    return MemoryPart("gradients", "Gradients", mb, "fp32")


def optimizer_state(f: RunFacts, trained: int) -> MemoryPart:
    optimizer = f.config.training.optimizer
    if optimizer == "adamw8bit" and not f.gpu:
        optimizer = "adamw"
        f.notes.append("8-bit Adam needs a CUDA GPU; a CPU run uses AdamW")
    per_param = float(f.calibration["optimizer_bytes_per_param"][optimizer])
    detail = f"1/{f.shards} on each GPU (sharded)" if f.shards > 1 else ""
    return MemoryPart("optimizer", f"Optimizer state ({optimizer})", trained * per_param / MB / f.shards, detail)


def moving_average(f: RunFacts, trained: int) -> MemoryPart | None:
    """training.ema: an fp32 copy of the trained weights, on the GPU unless ema_on_cpu keeps it in RAM."""
    training = f.config.training
    if not training.ema:
        return None
    if training.ema_on_cpu:
        f.notes.append("EMA in CPU memory: it visits the GPU for each update, after the step's peak")
        return None
    return MemoryPart("ema", "EMA of the trained weights", trained * 4 / MB, "fp32")


def weight_copies(f: RunFacts) -> MemoryPart | None:
    """What autograd saves for the backward once per model, whatever the batch: under mixed precision
    the 16-bit copies autocast makes of fp32 weights (a full fine-tune), counted on the meta device."""
    if not f.gpu or f.shards > 1:  # sharded weights are gathered a unit at a time (sharded_parts.py counts them)
        return None
    mb = _checkpointing_blend(f, lambda checkpointing: _counted(f, "model_copies_mb", checkpointing))
    if mb < 1.0:
        return None
    return MemoryPart("weight_copies", "16-bit weight copies (autocast)", mb,
                      "saved for the backward once per model, whatever the batch")


def _precision_key(f: RunFacts) -> str:
    if not f.gpu:
        return "fp32"
    if f.config.training.mixed_precision != "no":
        return "mixed"
    return "fp32" if f.frozen == "fp32" else "fp16"


def _checkpointed_share(f: RunFacts) -> float:
    """The share of the denoiser's blocks recomputed in the backward (1/N with checkpointing_interval N)."""
    return 1.0 / f.config.training.checkpointing_interval


def _counted(f: RunFacts, section: str, checkpointing: bool) -> float:
    """One meta-device count of `section` (per image or per model) for this run's method and precision."""
    stem = "full" if f.full else "lora"
    key = f"{stem}{'_checkpointing' if checkpointing else ''}_{_precision_key(f)}"
    return float(f.arch.get(section, {}).get(key, 0.0))


def _checkpointing_blend(f: RunFacts, term: Callable[[bool], float]) -> float:
    """A term with every N-th block checkpointed, between none and all (1/N of the blocks recomputed)."""
    if not f.config.training.gradient_checkpointing:
        return term(False)
    share = _checkpointed_share(f)
    return term(True) + (term(False) - term(True)) * (1 - share)


def activations(f: RunFacts) -> MemoryPart:
    """Saved activations per image (counted on the meta device at the native size) scaled by pixels and
    batch, times the device's peak factor; every N-th block checkpointed lies between none and all."""
    training = f.config.training
    counted, factors = f.arch["activations_mb"], f.device_calibration["activation_peak_factor"]
    # Edit pairs: the denoiser reads a control's tokens beside the target's (one control per pair counted).
    references = 1 if f.config.dataset.kind == "edit" else 0
    scale = f.batch * (1 + references) * (f.side / int(counted["resolution"])) ** 2

    def peak(checkpointing: bool) -> float:
        factor = float(factors["checkpointing" if checkpointing else "no_checkpointing"])
        return _counted(f, "activations_mb", checkpointing) * scale * factor

    detail = f"{f.side} px, batch {f.batch}, " + ("with a control image's tokens, " if references else "")
    mb = _checkpointing_blend(f, peak)
    if not training.gradient_checkpointing:
        return MemoryPart("activations", "Activations", mb, detail + "without gradient checkpointing")
    every = "every block" if _checkpointed_share(f) == 1 else f"one block in {training.checkpointing_interval}"
    return MemoryPart("activations", "Activations", mb, detail + f"gradient checkpointing of {every}")


def runtime_overhead(f: RunFacts) -> MemoryPart:
    c = f.device_calibration
    if f.gpu:
        return MemoryPart("overhead", "CUDA context and workspaces",
                          float(c["cuda_context_mb"]) + float(c["workspace_mb"]), "cuDNN/cuBLAS kernels and handles")
    return MemoryPart("overhead", "Runtime overhead", float(c["runtime_mb"]) + float(c["workspace_mb"]),
                      "Python and torch runtime, kernel workspaces")


def allocator_slack(f: RunFacts, dynamic_mb: float) -> MemoryPart:
    return MemoryPart("allocator", "Allocator slack", dynamic_mb * f.slack,
                      f"{f.slack:.0%} over the largest transient (blocks rounded and split)")
