"""What a model family is, as data: the one declaration every part of the studio reads.

A family's file (`<family>.py` beside this one) fills in a `FamilySpec`;
`studio/core/families/registry.py` lists them. The schema, the GUI form, the estimate, the
bundle, the model-file detection, the CLI and the trainer's pipeline builders read the spec,
so none of them names a family. Torch-free: the GUI and the core import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# How a family turns an image into a training target: DDPM noise schedules (epsilon or
# v-prediction), or flow matching (the velocity from image to noise).
Objective = Literal["ddpm", "flow_matching"]
# What the denoiser learns to predict, in model-spec's words (modelspec.prediction_type): the noise
# ("epsilon"), a DDPM schedule's velocity ("v"), or the flow from image to noise ("flow").
Prediction = Literal["epsilon", "v", "flow"]
# modelspec.implementation ids as kohya's sd-scripts writes them (library/sai_model_spec.py): its SDXL LoRAs
# and original-layout checkpoints are the Stability "sgm" code's, its SD1.x and SD3 LoRAs diffusers'.
STABILITY_AI = "https://github.com/Stability-AI/generative-models"
DIFFUSERS = "diffusers"
# CLIP truncates a prompt at 77 tokens, two of which are start/end markers.
CLIP_TOKEN_LIMIT = 75
# A checkpoint's tensor names, and the shape of one of them (None when it is absent).
Shape = Callable[[str], "list[int] | None"]
KindRule = Callable[[set[str], Shape], "str | None"]
# What showed the family (for messages), or None when the rule does not match.
TensorRule = Callable[[set[str]], "str | None"]
FolderRule = Callable[[Path, Callable[[Path], dict[str, object]]], "str | None"]


@dataclass(frozen=True)
class CheckpointKind:
    """A kind of single checkpoint file a family reads (diffusers' name for it where it has one)."""

    name: str
    title: str  # what a person reads: "SDXL base"
    offline: bool = False  # the studio ships its pipeline configs: it loads with no network
    # A model setting (ModelSection's name) that, when on, takes a part of an offline kind's pipeline from the
    # hub after all, and that part in words: ("use_t5", "the T5 encoder's config and tokenizer").
    hub_when: tuple[str, str] | None = None
    refused: str | None = None  # why the studio cannot train it


@dataclass(frozen=True)
class Condition:
    """Another setting's values a setting needs to act (logit_mean needs logit_normal sampling)."""

    key: str
    values: tuple[object, ...]

    def describe(self) -> str:
        shown = " or ".join(f'"{v}"' if isinstance(v, str) else str(v).lower() for v in self.values if v is not None)
        return f"{self.key} {'empty' if not shown else '= ' + shown}"


@dataclass(frozen=True)
class Setting:
    """A setting that acts only for some families (and methods, and with some other settings).

    Settings that are in no family's table act for every family.
    """

    key: str  # section.name in TrainConfig
    does: str  # what it does, for the message when it is refused
    instead: str = ""  # what to use instead where it does not act
    methods: tuple[str, ...] = ()  # empty: every method
    needs: tuple[Condition, ...] = ()  # every condition must hold for it to act


@dataclass(frozen=True)
class FamilySpec:
    name: str  # model.family in configs, presets and bundles
    title: str  # what a person reads: "SDXL"
    objective: Objective
    # The target the published base was trained on; a DDPM family's model.prediction_type may switch it.
    prediction: Prediction
    # modelspec.implementation of a LoRA file: the code kohya's trainers name for this family's LoRAs.
    lora_implementation: str
    # The caption tokens the text encoder reads (without start/end markers); the rest is cut off.
    caption_token_limit: int
    caption_encoder: str  # the text encoder that reads that many, for messages: "CLIP"
    pipeline_class: str  # the diffusers pipeline that samples and saves it
    pipeline_classes: tuple[str, ...]  # model_index.json classes that mean this family
    denoiser: str  # the pipeline's trained component: "unet" or "transformer"
    components: tuple[str, ...]  # the pipeline's model components
    native_resolution: int  # the resolution the published base was trained at
    # The samples' denoising steps and guidance where a config names none (its presets' and its pipeline's own:
    # guidance 7 makes a guidance-4 family's pictures look burnt).
    sample_steps: int
    sample_guidance: float
    # Image sides are a multiple of this many pixels: the VAE's downscale (8), times the transformer's patch
    # (2) where its denoiser cuts the latents into patches; a side off it fails at the first step.
    pixel_multiple: int
    settings: tuple[Setting, ...]  # the settings that act only for some families and act for this one
    fsdp_units: tuple[str, ...]  # the denoiser's block classes that become FSDP units
    checkpointed_blocks: tuple[str, ...]  # the denoiser's blocks recomputed under gradient checkpointing
    download_gb: float  # a hub base's training files, roughly (the bundle's free-disk check)
    kinds: tuple[CheckpointKind, ...]  # single checkpoint files of this family
    single_file_text_encoders: tuple[str, ...]  # where a single file keeps the text encoders
    missing_text_encoder_example: str = ""  # a common file that lacks them, for the message
    modelspec_architecture: str | None = None  # model-spec name of a single-file output; None: none written
    separate_vae_fp16_safe: bool = False  # a separate VAE given for it is the fp16-safe one (SDXL's fix)
    methods: tuple[str, ...] = ("lora", "dreambooth")  # the methods the studio trains it with
    trains_text_encoders: bool = True  # method.train_text_encoder can be on
    # It trains edit pairs (dataset.kind = "edit"): its pipeline conditions on reference images, and the trainer
    # gives the denoiser the control images' latents as that pipeline does when it samples.
    trains_edit_pairs: bool = False
    # A family whose edit pairs train on an edit model of its own (Qwen-Image-Edit beside Qwen-Image): whether a base
    # model is that edit model (its folder's model_index.json, a hub id's name), and what a person reads for it. That
    # model trains edit pairs only; the family's other models train images only.
    edit_model: Callable[[str], bool] | None = field(default=None, repr=False)
    edit_title: str = ""
    # The control images a pair may have on the edit model a base model is (its pipeline's number); 0: any number.
    edit_controls: Callable[[str], int] = field(default=lambda base: 0, repr=False)
    # The programs that load its kohya-format LoRA file and its LyCORIS (LoHa/LoKr) file, as the Runs page and
    # `studio-train run` name them beside each output (docs/index.md's "Which file to load where").
    kohya_readers: str = "ComfyUI"
    lycoris_readers: str = "ComfyUI"
    # The denoiser's repeated blocks that training.compile = "blocks" compiles once, where its diffusers
    # class does not name them itself (`_repeated_blocks`).
    repeated_blocks: tuple[str, ...] = ()
    # A family declared outside the studio (STUDIO_FAMILY_MODULES, registry.py): the importable module that
    # holds its trainer's `ADAPTER` and its `build_tiny`. Empty: the studio's own homes, found by the name.
    home: str = ""
    # A family whose denoiser is another's architecture under a name of its own: the counted
    # architecture it reads (resources/architectures/<counted_as>.json). Empty: its own name.
    counted_as: str = ""
    # The samples' (steps, guidance) of a base model sampled otherwise than the family's others (a step-distilled
    # one, told by its name); None: the family's own.
    sampling_of: Callable[[str], tuple[int, float] | None] = field(default=lambda base: None, repr=False)
    # The samples' guidance above which its pipeline draws with the negative prompt (classifier-free guidance):
    # at or below it the negative prompt is never read. And whether a base model has its guidance distilled into
    # it, so that its pipeline reads no negative prompt at any guidance.
    negative_prompt_above: float = 1.0
    guidance_distilled: Callable[[str], bool] = field(default=lambda base: False, repr=False)
    # Families of several architectures (sizes): the size a base model is, and each size's hub base.
    size_of: Callable[[str], str] | None = field(default=None, repr=False)
    size_bases: dict[str, str] = field(default_factory=dict)
    size_download_gb: dict[str, float] = field(default_factory=dict)
    checkpoint_kind: KindRule = field(default=lambda keys, shape: None, repr=False)
    tensor_rule: TensorRule = field(default=lambda keys: None, repr=False)
    folder_rule: FolderRule = field(default=lambda folder, read: None, repr=False)

    def architecture(self, base: str) -> str:
        """The counted architecture (resources/architectures/<name>.json) a base model of this family has."""
        name = self.counted_as or self.name
        return f"{name}-{self.size_of(base)}" if self.size_of is not None else name

    def download_gb_of(self, base: str) -> float:
        """A hub base's training files, roughly, for this base model's size."""
        if self.size_of is not None:
            return self.size_download_gb.get(self.size_of(base), self.download_gb)
        return self.download_gb

    def text_reader(self, use_t5: bool) -> tuple[int, str]:
        """The caption or prompt tokens the text encoders read, and the encoder that reads them: a family whose T5
        is optional (model.use_t5) reads only CLIP's without it, whatever its T5 would have read."""
        if not use_t5 and self.setting("model.use_t5") is not None:
            return CLIP_TOKEN_LIMIT, "CLIP"
        return self.caption_token_limit, self.caption_encoder

    def reads_negative_prompt(self, base: str, guidance: float) -> bool:
        """Whether samples of `base` at `guidance` are drawn with their negative prompt."""
        return guidance > self.negative_prompt_above and not self.guidance_distilled(base)

    def setting(self, key: str) -> Setting | None:
        return next((s for s in self.settings if s.key == key), None)

    def kind(self, name: str) -> CheckpointKind | None:
        return next((k for k in self.kinds if k.name == name), None)
