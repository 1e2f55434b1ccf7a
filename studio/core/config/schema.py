"""TrainConfig: the sections of the versioned training configuration and their rules.

The key names are a contract: people's files and exported bundles depend on them.
Add fields freely; rename none (add a migration instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from studio.core.config import prompt_options as prompt
from studio.core.config.errors import Contradiction, section_type
from studio.core.config.rules import data_rules as data
from studio.core.config.rules.edit_pairs import EditPairFields, check_edit_pairs
from studio.core.config.rules.launch_rules import (
    address_on_one_line,
    check_launch,
    check_strategy,
    gpu_ids_in_one_string,
)
from studio.core.config.rules.network_rules import check_ema, check_network
from studio.core.config.rules.pickled import check_pickle
from studio.core.config.rules.run_rules import check_frozen_base, check_settings_act, check_training
from studio.core.config.rules.swap_rules import check_block_swap
from studio.core.containment import windows_refusal
from studio.core.families import FAMILIES, FAMILY_NAMES, fill_own_sampling

SCHEMA_VERSION = 1

# The registered families (studio/core/families/registry.py) are the allowed values.
if TYPE_CHECKING:
    Family = str
else:
    Family = Literal[FAMILY_NAMES]
MethodKind = Literal["lora", "dreambooth"]
Network = Literal["lora", "locon", "loha", "lokr"]
Precision = Literal["no", "fp16", "bf16"]
WeightDtype = Literal["fp32", "fp16", "bf16"]
FrozenDtype = Literal["auto", "fp32", "fp16", "bf16"]
OutputFormat = Literal["diffusers", "kohya", "single_file"]
Strategy = Literal["ddp", "fsdp"]
_DEFAULT_FORMATS: tuple[OutputFormat, ...] = ("diffusers", "kohya")
# The sidecar caption files training reads (studio/core/dataset/captions/caption_sources.py).
CAPTION_EXTENSIONS = (".txt", ".caption")


class Section(BaseModel):
    """A config table: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSection(Section):
    family: Family = Field(description="Model family: " + ", ".join(f"{f.name} ({f.title})" for f in FAMILIES) + ".")
    base: str = Field(
        min_length=1,
        description="Base model: a diffusers folder, a single .safetensors file, or a hub id.",
    )
    vae: str | None = Field(
        default=None, description="Separate VAE (folder, file or hub id), e.g. an fp16-safe SDXL VAE."
    )
    revision: str | None = Field(default=None, description="Hub revision (branch, tag or commit).")
    variant: str | None = Field(default=None, description="Hub weight variant, e.g. fp16.")
    dtype: FrozenDtype = Field(
        default="auto",
        description="Precision of the frozen weights (VAE, text encoders, frozen base) on a GPU; "
        "auto follows training.mixed_precision (fp16, bf16, or fp32 under no).",
    )
    prediction_type: Literal["auto", "epsilon", "v_prediction"] = Field(
        default="auto", description="Noise prediction target; auto reads the scheduler config."
    )
    use_t5: bool = Field(
        default=False, description="SD3: load the T5 text encoder (large; off saves ~10 GB)."
    )
    fp8_base: bool = Field(
        default=False,
        description="LoRA: keep the frozen denoiser weights in 8-bit float (e4m3) and widen each layer to the "
        "training precision only while it runs: about half the denoiser's memory, a small quality cost. "
        "Not with DoRA (method.use_dora) or model.quantized_base.",
    )
    quantized_base: Literal["none", "int8", "nf4"] = Field(
        default="none",
        description="LoRA: keep the frozen denoiser's linear layers quantized while the LoRA trains in full or "
        "mixed precision beside them: int8 (a byte a weight with a scale per row, near the full base's "
        "quality) or nf4 (4-bit by bitsandbytes, about half a byte a weight, a larger quality cost; needs the "
        "studio's cuda extra). The LoRA file is the same and loads on the full-precision base. Not with "
        "model.fp8_base, DoRA or a full fine-tune; nf4 not with LoHa or LoKr.",
    )
    blocks_to_swap: int = Field(
        default=0, ge=0,
        description="LoRA on a transformer: keep the frozen weights of this many of the denoiser's last blocks in "
        "system memory and copy each to the GPU just ahead of use (forward and backward); the LoRA stays on the "
        "GPU. Saves about that many blocks' weights of VRAM for as much pinned RAM, at a slower step (the "
        "estimate says how much). With model.fp8_base the 8-bit weights travel (half the copying); not with "
        "training.compile. 0: every block stays on the GPU.",
    )
    text_encoder_on_cpu: bool = Field(
        default=False,
        description="Keep the frozen text encoders in system memory and encode the captions and the sample "
        "prompts there (needs training.cache_text_embeddings): caching is much slower, but the encoders take "
        "no GPU memory (a FLUX.2 [klein] 4B LoRA in 8 GB). The same embeddings, computed on the CPU.",
    )
    allow_pickle: bool = Field(
        default=False,
        description="Load a .ckpt/.pt/.bin base model or VAE (a pickle: loading one can run code hidden in it) "
        "as data only, with a warning; convert it to .safetensors instead where you can.",
    )
    training_adapter: str | None = Field(
        default=None,
        description="A LoRA file (.safetensors) merged into the base model for training and left out of the "
        "outputs: a step-distilled model's training adapter, which keeps the distillation from breaking. Only "
        "for the families that declare it.",
    )
    clip_skip: int = Field(
        default=1, ge=1, le=12,
        description="SD1.5: take the text encoder's output this many layers from the end, as kohya and A1111 "
        "count (2 for anime models made that way; 1 is the last layer). SDXL and SD3 always use their "
        "penultimate layer.",
    )


class MethodSection(Section):
    kind: MethodKind = Field(default="lora", description="lora (small adapter) or dreambooth (full fine-tune).")
    rank: int = Field(default=16, ge=1, le=1024, description="LoRA rank (dimension).")
    alpha: float | None = Field(
        default=None, gt=0, description="LoRA alpha; empty means equal to the rank."
    )
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="LoRA dropout.")
    target_modules: list[str] = Field(
        default_factory=list,
        description="Module names the LoRA wraps; empty means the family's attention projections.",
    )
    train_text_encoder: bool = Field(
        default=False, description="Also train the text encoder(s)."
    )
    text_encoder_rank: int | None = Field(
        default=None, ge=1, le=1024, description="LoRA rank for the text encoders; empty means the rank."
    )
    blocks: list[int] = Field(
        default_factory=list,
        description="SD3: transformer block indices the LoRA is applied to; empty means all.",
    )
    use_dora: bool = Field(default=False, description="LoRA: weight-decomposed LoRA (DoRA).")
    network: Network = Field(
        default="lora",
        description="The adapter's kind (LyCORIS): lora; locon (LoRA on the convolution layers too); loha "
        "(Hadamard product of two low-rank pairs); lokr (Kronecker product of two factors).",
    )
    lokr_factor: int | None = Field(
        default=None, ge=2, le=1024,
        description="LoKr: the size of the small Kronecker factor (e.g. 8 or 16); empty means as even a "
        "split as each layer allows.",
    )
    conv_rank: int | None = Field(
        default=None, ge=1, le=1024,
        description="Rank of the adapter on the convolution layers (locon, loha, lokr); empty: locon uses the "
        "rank, loha and lokr leave the convolution layers out.",
    )
    conv_alpha: float | None = Field(default=None, gt=0, description="Alpha of the convolution layers' adapter; "
                                     "empty means equal to conv_rank.")

    @property
    def lora_alpha(self) -> float:
        return float(self.alpha if self.alpha is not None else self.rank)


class ConceptSection(Section):
    path: str = Field(min_length=1, description="Folder of training images.")
    repeats: int = Field(default=1, ge=1, le=10000, description="Times each image is seen per epoch.")
    caption_source: Literal["auto", "txt", "caption", "metadata", "folder", "prompt"] = Field(
        default="auto",
        description="Where captions come from: auto tries .txt, .caption, metadata.jsonl, folder name.",
    )
    instance_prompt: str | None = Field(
        default=None, description="DreamBooth: prompt for every instance image (used when caption_source is prompt or no caption exists)."
    )
    class_prompt: str | None = Field(default=None, description="DreamBooth: prompt of the class images.")
    class_path: str | None = Field(default=None, description="DreamBooth: folder of class images.")
    num_class_images: int = Field(
        default=0, ge=0, le=100000, description="Class images wanted; missing ones are generated."
    )
    prior_loss_weight: float = Field(default=1.0, ge=0.0, le=100.0, description="Weight of the prior-preservation loss.")

    @model_validator(mode="after")
    def _class_images_need_prompt(self) -> ConceptSection:
        if self.num_class_images > 0 and not self.class_prompt:
            raise ValueError(
                "num_class_images is set but class_prompt is empty: "
                "prior preservation needs a class prompt (e.g. 'a photo of a dog')"
            )
        return self

    @property
    def uses_prior_preservation(self) -> bool:
        return self.class_prompt is not None and (self.num_class_images > 0 or self.class_path is not None)


class DatasetSection(Section, EditPairFields):
    concepts: list[ConceptSection] = Field(default_factory=list, description="Image folders to train on.")
    resolution: int = Field(default=512, ge=64, le=4096, multiple_of=8, description="Training resolution in pixels.")
    buckets: bool = Field(default=True, description="Group images by aspect ratio instead of square crops.")
    bucket_step: int = Field(default=64, ge=8, le=256, multiple_of=8, description="Bucket size step in pixels.")
    min_bucket: int = Field(default=256, ge=64, le=4096, description="Smallest bucket side in pixels.")
    max_bucket: int = Field(default=2048, ge=64, le=8192, description="Largest bucket side in pixels.")
    crop: Literal["center", "random"] = Field(default="center", description="How an image is cropped to its bucket.")
    flip: bool = Field(default=False, description="Randomly flip images horizontally.")
    shuffle_tags: bool = Field(default=False, description="Shuffle comma-separated tags each step.")
    keep_tokens: int = Field(default=0, ge=0, le=100, description="Tags kept in place at the start when shuffling.")
    caption_dropout: float = Field(default=0.0, ge=0.0, le=1.0, description="Chance of an empty caption.")
    caption_extension: str = Field(default=".txt", description="Sidecar caption extension preferred when writing: "
                                   ".txt or .caption (the ones training reads).")
    latents: Literal["sample", "mean"] = Field(
        default="sample",
        description="What an image becomes for training: a sample of the VAE's latent distribution (a new one "
        "each step, or one per image when training.cache_latents is on, as kohya and diffusers' examples do) "
        "or the distribution's mean (the same latents every time).",
    )
    validation_fraction: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="Share of the images held out of training for the validation "
        "loss (chosen by file name, the same in every run); 0 holds none out.")
    validation_folder: str | None = Field(
        default=None, description="A folder of held-out images (with captions) for the validation loss.")
    masks: Literal["none", "folder", "alpha"] = Field(
        default="none", description="Weight the loss per pixel by a mask: a folder of mask images named as the "
        "images (white trains, black is ignored), or the image's alpha channel.")
    mask_folder: str | None = Field(default=None, description="With masks = \"folder\": the folder of mask images.")

    @field_validator("caption_extension")
    @classmethod
    def _read_when_training(cls, value: str) -> str:
        # Captions written to another extension (name.tags) would never be read: the images would train uncaptioned.
        extension = "." + value.strip().lstrip(".").lower()
        if extension not in CAPTION_EXTENSIONS:
            raise Contradiction("dataset.caption_extension", value, f"training reads captions from {' and '.join(CAPTION_EXTENSIONS)} files (and "
                             f"metadata.jsonl) only, so captions written to {extension} files would never be "
                             "trained; choose \".txt\" or \".caption\"")
        return extension


class TrainingSection(Section):
    batch_size: int = Field(default=1, ge=1, le=1024, description="Images per step per GPU.")
    gradient_accumulation: int = Field(default=1, ge=1, le=1024, description="Steps accumulated per optimizer update.")
    epochs: int | None = Field(default=None, ge=1, le=100000, description="Epochs to train (or max_steps).")
    max_steps: int | None = Field(default=None, ge=1, le=10_000_000, description="Optimizer steps to train.")
    learning_rate: float = Field(default=1e-4, gt=0.0, le=1.0, description="Learning rate.")
    text_encoder_lr: float | None = Field(default=None, gt=0.0, le=1.0, description="Text-encoder learning rate; empty means learning_rate.")
    lr_scheduler: Literal[
        "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial"
    ] = Field(default="constant", description="Learning-rate schedule.")
    lr_warmup_steps: int = Field(default=0, ge=0, description="Warm-up steps.")
    lr_cycles: int = Field(default=1, ge=1, le=1000, description="cosine_with_restarts: how many cosine cycles the "
                           "run makes, the rate starting again from its peak at each (1: no restart).")
    lr_power: float = Field(default=1.0, gt=0.0, le=10.0, description="polynomial: the curve's power (1 falls in a "
                            "straight line; 2 falls faster at first, then slower).")
    optimizer: Literal["adamw", "adamw8bit", "prodigy", "adafactor"] = Field(
        default="adamw", description="Optimizer; adamw8bit needs CUDA and bitsandbytes."
    )
    weight_decay: float = Field(default=1e-2, ge=0.0, le=1.0, description="Weight decay.")
    max_grad_norm: float = Field(default=1.0, ge=0.0, description="Gradient clipping norm; 0 turns it off.")
    mixed_precision: Precision = Field(default="no", description="Mixed precision: no, fp16 or bf16.")
    gradient_checkpointing: bool = Field(default=False, description="Recompute activations to save memory.")
    checkpointing_interval: int = Field(
        default=1, ge=1, le=64,
        description="With gradient_checkpointing on: recompute only every N-th block of the denoiser "
        "(2 = every second block). Between no checkpointing and full: faster than 1, less memory than off.",
    )
    fill_card: bool = Field(
        default=False, description="At run start, use the GPU: gradient checkpointing off where the batch fits "
        "without it, and the largest batch that fits with the estimate's margin (accumulation 1, the learning "
        "rate scaled, counts in steps scaled to the same images). Presets that allow it turn it on.",
    )
    cache_latents: bool = Field(default=False, description="Encode images once and keep the latents.")
    cache_latents_to_disk: bool = Field(default=False, description="Keep cached latents on disk.")
    cache_text_embeddings: bool = Field(default=False, description="Encode captions once and keep the embeddings.")
    noise_offset: float = Field(default=0.0, ge=0.0, le=1.0, description="Noise offset (brighter/darker images).")
    min_snr_gamma: float | None = Field(default=None, gt=0.0, le=100.0, description="Min-SNR loss weighting gamma (5 is common).")
    timestep_sampling: Literal["logit_normal", "mode", "uniform"] = Field(
        default="logit_normal", description="Flow matching: how the timesteps are drawn."
    )
    loss_weighting: Literal["none", "sigma_sqrt", "cosmap"] = Field(
        default="none", description="Flow matching: how the loss is weighted per noise level."
    )
    logit_mean: float = Field(default=0.0, description="Flow matching: logit-normal mean.")
    logit_std: float = Field(default=1.0, gt=0.0, description="Flow matching: logit-normal standard deviation.")
    mode_scale: float = Field(default=1.29, description="Flow matching: scale of the mode sampling scheme.")
    shift: float | None = Field(
        default=None, gt=0.0, le=100.0,
        description="SD3 and Z-Image: shift of the flow-matching noise levels (higher trains more at high noise, as for "
        "larger images); empty means the scheduler's own (3.0 for SD3).",
    )
    seed: int = Field(default=42, ge=0, le=2**32 - 1, description="Random seed.")
    dataloader_workers: int = Field(default=0, ge=0, le=64, description="Data-loading worker processes.")
    ema: bool = Field(default=False, description="Keep an exponential moving average (EMA) of the trained weights "
                      "and save it beside them.")
    ema_decay: float = Field(default=0.999, ge=0.5, lt=1.0, description="EMA: how much of the average each update "
                             "keeps (0.999 averages over about the last 1000 updates; it warms up from 0).")
    ema_every: int = Field(default=1, ge=1, le=10000, description="EMA: update the average every N optimizer steps.")
    ema_on_cpu: bool = Field(default=False, description="EMA: keep the average in CPU memory (it visits the GPU "
                             "only for its updates): saves its size in VRAM.")
    ema_for_samples: bool = Field(default=False, description="EMA: make the samples with the averaged weights.")
    validation_every: int = Field(
        default=0, ge=0, description="Measure the validation loss (fixed timesteps and noise) every N steps and "
        "at the end; 0 turns it off. Needs dataset.validation_fraction or dataset.validation_folder.")
    compile: Literal["off", "blocks", "full", "graphs"] = Field(
        default="off",
        description="Compile the denoiser with torch.compile for faster steps. blocks compiles each repeated "
        "transformer block once (the first step takes seconds to a minute longer, later steps are faster); "
        "full compiles the whole denoiser (longer first step); graphs compiles it whole and replays each "
        "image size's step as a CUDA graph (no launch cost per kernel: small batches stop waiting on the CPU; "
        "more GPU memory). Needs a C++ compiler on the CPU and Triton on "
        "the GPU; compiled kernels are cached in the studio's cache folder, so the next run starts faster.",
    )

    @property
    def length(self) -> tuple[str, int]:
        """("steps", N) when max_steps is set, else ("epochs", N; 10 when neither is set)."""
        if self.max_steps is not None:
            return "steps", self.max_steps
        return "epochs", self.epochs or 10

    def effective_batch(self, processes: int = 1) -> int:
        """Images per optimizer update: the per-GPU batch, times accumulation, times the processes."""
        return effective_batch(self.batch_size, self.gradient_accumulation, processes)


class SamplingSection(Section):
    every_n_steps: int = Field(default=0, ge=0, description="Make sample images every N steps; 0 turns it off.")
    at_start: bool = Field(default=False, description="Also make the samples before the first step: the base "
                           "model's pictures, to compare the trained ones with (not again when a run resumes).")
    prompts: list[str] = Field(default_factory=list, description="Sample prompts; each may end with its own settings: "
                               f"{prompt.OPTIONS_TAKEN} (a cat --w 768 --h 512 --d 42).")
    negative_prompt: str = Field(default="", description="Negative prompt for samples.")
    steps: int = Field(default=20, ge=prompt.STEPS_BOUNDS[0], le=prompt.STEPS_BOUNDS[1], description="Denoising steps per sample.")
    guidance: float = Field(default=7.0, ge=prompt.GUIDANCE_BOUNDS[0], le=prompt.GUIDANCE_BOUNDS[1], description="Classifier-free guidance scale.")
    seed: int = Field(default=1234, ge=prompt.SEED_BOUNDS[0], le=prompt.SEED_BOUNDS[1], description="Seed of the sample images.")
    size: int | None = Field(default=None, ge=prompt.SIZE_BOUNDS[0], le=prompt.SIZE_BOUNDS[1], multiple_of=8, description="Sample size; empty means the resolution.")
    control_image: str | None = Field(
        default=None, description="With dataset.kind = \"edit\": the control (reference) image every sample "
        "prompt edits, best one held out of the training pairs; empty: the first pair's control images. Saved "
        "beside each sample so the before and after show together.")
    vae_tiling: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Decode sample images tile by tile to cap the VAE's memory: auto does so when decoding whole "
        "images would need more memory than the training steps; on and off force it.",
    )


class OutputSection(Section):
    dir: str = Field(default="runs", description="Folder where run folders are made.")
    # A run folder is named <YYYYmmdd-HHMMSS>-<name>; most file systems allow 255 bytes per name.
    name: str = Field(default="run", pattern=r"^[A-Za-z0-9._-]+$", max_length=100,
                      description="Run name (letters, digits, . _ -; at most 100).")
    save_every_n_steps: int = Field(default=0, ge=0, description="Checkpoint every N steps; 0 saves only at the end.")
    keep_last: int = Field(default=3, ge=1, le=1000, description="Checkpoints kept.")
    save_every_n_epochs: int = Field(
        default=0, ge=0,
        description="LoRA: also write the LoRA at the end of every N-th epoch (output/epoch-NNNN/), to try "
        "each in your UI and keep the best; 0 writes only the final one.",
    )
    formats: list[OutputFormat] = Field(
        default_factory=lambda: list(_DEFAULT_FORMATS), description="Output formats."
    )
    save_precision: WeightDtype = Field(default="fp16", description="Precision of the saved weights.")
    log_to: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list, description="Also log loss, learning rate, validation loss and samples to "
        "TensorBoard (RUN_DIR/tensorboard) and/or Weights & Biases (WANDB_MODE=offline works without network). "
        "Needs `pip install 'sd-training-studio[logging]'` in the training environment.")

    _a_folder_named = field_validator("dir")(staticmethod(data.output_dir_named))

    @field_validator("name")
    @classmethod
    def _a_name_windows_can_hold(cls, value: str) -> str:
        # The run's files are <name>.safetensors in a folder <stamp>-<name>: on Windows nul.safetensors writes
        # nowhere and a folder's last dot is dropped, so the run would lose its result at its end.
        why = windows_refusal(value)
        if why:
            raise Contradiction("output.name", value, f"{why}; the run's folder and files are named after it: "
                                "choose another name, such as my-lora")
        return value


class LaunchSection(Section):
    num_processes: int = Field(default=1, ge=1, le=1024, description="Training processes in all (one per GPU).")
    num_machines: int = Field(default=1, ge=1, le=128, description="Machines (nodes).")
    gpu_ids: str = Field(default="all", pattern=r"^(all|\d+(,\d+)*)$", description="GPUs to use: all or e.g. 0,1.")
    main_process_ip: str = Field(default="127.0.0.1", description="Address of the machine with rank 0.")
    main_process_port: int = Field(default=29500, ge=1024, le=65535, description="Port of the rank-0 process.")
    machine_rank: int = Field(default=0, ge=0, description="This machine's rank.")
    python: str | None = Field(default=None, description="Training interpreter; empty means the studio's own.")
    cpu: bool = Field(default=False, description="Train on the CPU even when a GPU exists.")
    strategy: Strategy = Field(
        default="ddp",
        description="How several processes share a run: ddp keeps the trained weights, their gradients and the "
        "optimizer state whole on every GPU; fsdp (fully sharded data parallel) splits them across the GPUs, "
        "so a full fine-tune too large for one card trains on several. fsdp is for DreamBooth, in bf16 or "
        "full precision.",
    )

    _address_on_one_line = field_validator("main_process_ip")(staticmethod(address_on_one_line))

    _gpus_as_one_string = field_validator("gpu_ids", mode="before")(staticmethod(gpu_ids_in_one_string))


class TrainConfig(Section):
    schema_version: int = Field(default=SCHEMA_VERSION, description="Config format version.")
    model: ModelSection
    method: MethodSection = Field(default_factory=MethodSection)
    dataset: DatasetSection = Field(default_factory=DatasetSection)
    training: TrainingSection = Field(default_factory=TrainingSection)
    sampling: SamplingSection = Field(default_factory=SamplingSection)
    output: OutputSection = Field(default_factory=OutputSection)
    launch: LaunchSection = Field(default_factory=LaunchSection)

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        # Its family's (or base model's) steps and guidance, where none is named.
        fill_own_sampling(self.sampling, self.model.family, self.model.base)
        for rule in CONSISTENCY_RULES:
            rule(self)
        return self


# Each raises a Contradiction naming the key, its value and what to do; the first one found is reported.
CONSISTENCY_RULES: tuple[Callable[[TrainConfig], None], ...] = (
    data.check_caches, check_training, check_frozen_base, check_settings_act, check_strategy, check_launch,
    check_pickle, check_network, check_ema, check_block_swap, data.check_validation, data.check_masks,
    check_edit_pairs, data.check_sides, data.check_prompt_options,
)


def effective_batch(batch_size: int, gradient_accumulation: int, processes: int = 1) -> int:
    """Images per optimizer update (`TrainingSection.effective_batch`, and the cost table's workload)."""
    return batch_size * gradient_accumulation * max(processes, 1)


def field_descriptions(model: type[BaseModel] = TrainConfig, prefix: str = "") -> dict[str, str]:
    """`section.key` -> description, for tooltips and docs."""
    out: dict[str, str] = {}
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        sub = section_type(field.annotation)
        if sub is not None and sub is not ConceptSection:
            out.update(field_descriptions(sub, key + "."))
        elif field.description:
            out[key] = field.description
    return out
