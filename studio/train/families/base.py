"""The seam between the training loop and a model family.

A family is one module in this package defining a `FamilyAdapter` subclass and
exposing it as `ADAPTER`; the loop never asks which family it trains. The adapter
loads the components, names the modules LoRA wraps, encodes prompts and images,
chooses the noise scheme, predicts, builds the sample pipeline and writes outputs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from studio.core.config.schema import TrainConfig
from studio.core.families import family as declared_family
from studio.train.components import Components
from studio.train.families.schemes import NoiseScheme
from studio.train.pipelines.hub_layout import text_encoder_key, write_hub_layout

Conditioning = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Picture:
    """How one sample is denoised: its size and the steps and guidance it is drawn with (a prompt's own
    --w/--h/--s/--l or the Sample settings tab's)."""

    width: int
    height: int
    steps: int
    guidance: float
# The conditioning key of an edit pair's reference latents, (B, controls, C, h, w): the families that train edit
# pairs (FamilySpec.trains_edit_pairs) give them to the denoiser as their pipeline does.
REFERENCES = "reference_latents"
ENCODER_HOME = torch.device("cpu")  # where model.text_encoder_on_cpu keeps the text encoders


class FamilyAdapter(ABC):
    """Everything family-specific the loop needs."""

    family: ClassVar[str]
    # Names under which the pipeline's LoRA loader expects each text encoder's layers.
    text_encoder_names: ClassVar[tuple[str, ...]] = ("text_encoder",)
    # The pipeline's trained component ("unet", "transformer"): the family's declaration says it.
    denoiser_name: ClassVar[str]
    # Whether the pipeline's LoRA loader wants the text encoders' keys diffusers-renamed (the UNet pipelines:
    # diffusers 0.3x infers a text encoder's layout from `lora_linear_layer`) or peft's as they are.
    rename_lora_keys: ClassVar[bool] = True
    # How the kohya-format file names its base model (ss_base_model_version, modelspec.architecture)
    # and which key prefixes it renames.
    kohya_base_version: ClassVar[str]
    kohya_architecture: ClassVar[str]
    kohya_renames: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "family" in cls.__dict__:
            cls.denoiser_name = declared_family(cls.family).denoiser

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        # Whether a caption's embedding depends on its edit pair's control images (Qwen-Image-Edit's encoder sees the
        # control in the prompt): the trainer then embeds each caption with its pair's controls
        # (`encode_edit_prompts`), and the caption cache keys an embedding by both. Set by `load`.
        self.prompt_sees_controls = False
        # Where `load` leaves the denoiser: None for the training device; system memory while the trainer
        # fills its caches first (data/caching_phase.py), so the encoders never share the GPU with it.
        self.denoiser_home: torch.device | None = None

    def home(self, module: torch.nn.Module, denoiser: torch.nn.Module, vae: torch.nn.Module,
             device: torch.device) -> torch.device:
        """Where `load` puts `module`: the training device; `denoiser_home` for the denoiser; system memory
        for a text encoder (neither the denoiser nor the VAE) with model.text_encoder_on_cpu."""
        if module is denoiser:
            return self.denoiser_home or device
        if module is not vae and self.config.model.text_encoder_on_cpu:
            return ENCODER_HOME
        return device

    def place_frozen(self, denoiser: torch.nn.Module, vae: torch.nn.Module, encoders: list[torch.nn.Module],
                     device: torch.device, weight_dtype: torch.dtype, dtypes: dict[str, torch.dtype]) -> None:
        """Freeze the loaded modules and put each where and in what precision training keeps it: the VAE in
        `vae_dtype`, the denoiser and each text encoder in its `load_dtypes` entry (by component name) or
        `weight_dtype`, on the device `home` gives it."""
        from studio.train.families.loading import vae_dtype

        for module in (denoiser, vae, *encoders):
            module.requires_grad_(False)
        # A pipeline names its encoders text_encoder, text_encoder_2, ... (SD3's T5, untrained, is the third).
        names = [self.text_encoder_names[i] if i < len(self.text_encoder_names) else f"text_encoder_{i + 1}"
                 for i in range(len(encoders))]
        placed: list[tuple[torch.nn.Module, Any]] = [
            (vae, vae_dtype(vae, weight_dtype)), (denoiser, dtypes.get(self.denoiser_name, weight_dtype)),
            *((encoder, dtypes.get(name, weight_dtype)) for encoder, name in zip(encoders, names, strict=True))]
        for module, dtype in placed:
            module.to(self.home(module, denoiser, vae, device))
            if module.dtype != dtype:
                module.to(dtype=dtype)

    # ------------------------------------------------------------ loading

    @abstractmethod
    def load(self, device: torch.device, weight_dtype: torch.dtype) -> Components:
        """Load the base model; raise TrainError("model", ...) naming the path when it cannot."""

    def load_dtypes(self, weight_dtype: torch.dtype) -> dict[str, torch.dtype]:
        """The precision of each pipeline component once loaded, by name ("default" for the rest).

        The weights a full fine-tune trains are fp32 from the start, so an fp32 checkpoint's
        values reach the optimizer exactly (not rounded through fp16 first); the VAE arrives in
        fp32 and `vae_dtype` settles it; everything else frozen is in `weight_dtype`.
        """
        dtypes = {"default": weight_dtype, "vae": torch.float32}
        method = self.config.method
        if method.kind == "dreambooth":
            dtypes[self.denoiser_name] = torch.float32
            if method.train_text_encoder:
                dtypes.update(dict.fromkeys(self.text_encoder_names, torch.float32))
        return dtypes

    @abstractmethod
    def default_lora_targets(self) -> list[str]:
        """Module names of the denoiser that LoRA wraps when the config names none."""

    def text_encoder_lora_targets(self) -> list[str]:
        return ["q_proj", "k_proj", "v_proj", "out_proj"]

    def encoder_lora_targets(self, index: int, encoder: torch.nn.Module) -> list[str]:
        """Modules of text encoder `index` that LoRA wraps: the target layers outside its `unused_encoder_parts`."""
        targets = self.text_encoder_lora_targets()
        unused = {id(module) for part in self.unused_encoder_parts(index, encoder) for module in part.modules()}
        if not unused:
            return targets
        return [name for name, module in encoder.named_modules()
                if name.rsplit(".", 1)[-1] in targets and id(module) not in unused]

    def unused_encoder_parts(self, index: int, encoder: torch.nn.Module) -> list[torch.nn.Module]:
        """The modules of trainable text encoder `index` whose output feeds nothing the family reads (the layers
        after the hidden state it takes). Trained, they would get no gradient, which data-parallel training
        refuses: the run failed at its second step on several GPUs. A LoRA leaves them out, a full fine-tune
        keeps them frozen (as they are in the base model). None by default."""
        return []

    def lora_targets(self) -> list[str]:
        return list(self.config.method.target_modules) or self.default_lora_targets()

    def trainable_encoders(self, components: Components) -> list[torch.nn.Module]:
        """The text encoders trained when method.train_text_encoder is on (SD3 keeps T5 frozen)."""
        return list(components.text_encoders)

    def add_lora(self, components: Components) -> None:
        """Wrap the target modules (and, when asked, the text encoders') with the configured adapter:
        LoRA, LoCon (LoRA on the convolution layers too), LoHa or LoKr."""
        from studio.train.networks.lycoris import (
            adapter_config,
            check_targets,
            conv_targets,
            uses_convolutions,
        )

        method = self.config.method
        check_targets(components.denoiser, list(method.target_modules), self.denoiser_name)
        convolutions = conv_targets(components.denoiser) if uses_convolutions(method) else []
        components.denoiser.add_adapter(adapter_config(  # type: ignore[operator]
            method, self.lora_targets(), method.rank, method.lora_alpha, convolutions))
        if method.train_text_encoder:
            rank = method.text_encoder_rank or method.rank
            encoder_alpha = method.lora_alpha * rank / method.rank
            for index, encoder in enumerate(self.trainable_encoders(components)):
                encoder.add_adapter(adapter_config(  # type: ignore[operator]
                    method, self.encoder_lora_targets(index, encoder), rank, encoder_alpha))

    # ------------------------------------------------------------ encoding

    @abstractmethod
    def encode_prompts(self, components: Components, captions: list[str]) -> Conditioning:
        """Text conditioning for a batch of captions (each tensor batch-first)."""

    def encode_edit_prompts(self, components: Components, captions: list[str],
                            controls: torch.Tensor) -> Conditioning:
        """Text conditioning of edit pairs' captions, each with its pair's control pixels (B, controls, 3, H, W) in
        [-1, 1]; a family whose encoder sees no image embeds the captions alone."""
        return self.encode_prompts(components, captions)

    def extra_conditioning(self, batch: dict[str, Any], cond: Conditioning, device: torch.device) -> Conditioning:
        """Conditioning that depends on the images (SDXL's size and crop ids); none by default."""
        return cond

    def encode_images(
        self, components: Components, pixels: torch.Tensor, draws: list[torch.Generator] | None = None
    ) -> torch.Tensor:
        """Pixels in [-1, 1], (B, 3, H, W) -> latents shifted and scaled by the VAE's factors.

        With `draws` (one generator per image) the latents are a sample of the VAE's distribution,
        drawn on the CPU so a seed gives the same sample on any device; without, its mean.
        SD1.5 and SDXL VAEs have no shift factor; SD3's has one. A VAE that declares per-channel
        latents_mean/std (an SDXL-style model's) is normalised by those, as its pipeline decodes (`decode`).
        """
        vae: Any = components.vae
        config = vae.config
        latents = draw_latents(vae.encode(pixels.to(vae.device, vae.dtype)).latent_dist, draws)
        mean, std = getattr(config, "latents_mean", None), getattr(config, "latents_std", None)
        if mean is not None and std is not None:
            shape = (1, -1, 1, 1)
            mean_t = torch.tensor(mean).view(shape).to(latents)
            std_t = torch.tensor(std).view(shape).to(latents)
            return (latents - mean_t) * config.scaling_factor / std_t
        return (latents - (getattr(config, "shift_factor", None) or 0.0)) * config.scaling_factor

    @abstractmethod
    def noise_scheme(self, components: Components) -> NoiseScheme:
        """The noising recipe and loss (epsilon/v-prediction or flow matching)."""

    @abstractmethod
    def predict(
        self, denoiser: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, cond: Conditioning
    ) -> torch.Tensor:
        """The denoiser's output for a noised batch."""

    # ------------------------------------------------------------ outputs

    @abstractmethod
    def make_pipeline(self, components: Components) -> Any:
        """A diffusers pipeline around the (unwrapped) components, for samples and saving."""

    # ------------------------------------------------------------ sampling
    # Samples are made in three stages (samples.py): the prompts' embeddings, the denoising to
    # latents, the decode. Each stage runs with only its own modules on the GPU.

    # The names under which the pipeline's call takes what `encode_prompt` returns, in its order.
    prompt_embedding_names: ClassVar[tuple[str, ...]] = ("prompt_embeds", "negative_prompt_embeds")

    def sample_conditioning(self, pipeline: Any, prompt: str, negative: str) -> Conditioning:
        """The pipeline's embeddings of one prompt and the negative one (the text encoders' stage)."""
        device = next(pipeline.text_encoder.parameters()).device
        embeds = pipeline.encode_prompt(
            **self.encode_prompt_arguments(prompt), device=device, num_images_per_prompt=1,
            do_classifier_free_guidance=True, negative_prompt=negative or None,
        )
        return dict(zip(self.prompt_embedding_names, embeds, strict=True))

    def sample_edit_conditioning(self, pipeline: Any, prompt: str, negative: str,
                                 references: Sequence[Any]) -> Conditioning:
        """The embeddings of one prompt and the negative one for samples that edit `references` (PIL control
        images); a family whose encoder sees no image embeds the prompts alone."""
        return self.sample_conditioning(pipeline, prompt, negative)

    def encode_prompt_arguments(self, prompt: str) -> dict[str, Any]:
        """The prompt arguments of the family pipeline's `encode_prompt`."""
        return {"prompt": prompt}

    def denoise(self, pipeline: Any, conditioning: Conditioning, generator: torch.Generator, picture: Picture,
                references: Sequence[Any] = ()) -> Any:
        """The denoised latents of one sample at its size, steps and guidance (the denoiser's stage);
        `references` (PIL images) are the control images an edit sample edits, the pipeline's `image`."""
        edit: dict[str, Any] = {"image": list(references)} if references else {}
        result = pipeline(
            num_inference_steps=picture.steps, guidance_scale=picture.guidance, height=picture.height,
            width=picture.width, generator=generator, output_type="latent", **conditioning, **edit,
        )
        return result.images

    def decode(self, vae: Any, latents: torch.Tensor) -> torch.Tensor:
        """Latents as the pipeline leaves them -> pixels in [-1, 1], in the VAE's own dtype and place.

        The inverse of `encode_images` (SDXL-style VAEs that declare latents_mean/std use those);
        the latents may come in any precision: a trained fp32 denoiser next to a bf16 VAE is common.
        """
        config = vae.config
        latents = latents.to(vae.device, vae.dtype)
        mean, std = getattr(config, "latents_mean", None), getattr(config, "latents_std", None)
        if mean is not None and std is not None:
            shape = (1, -1, 1, 1)
            mean_t = torch.tensor(mean).view(shape).to(latents)
            std_t = torch.tensor(std).view(shape).to(latents)
            latents = latents * std_t / config.scaling_factor + mean_t
        else:
            latents = latents / config.scaling_factor + (getattr(config, "shift_factor", None) or 0.0)
        image: torch.Tensor = vae.decode(latents, return_dict=False)[0]
        return image

    def save_lora(
        self,
        folder: Path,
        layers: dict[str, dict[str, torch.Tensor]],
        adapter_configs: dict[str, dict[str, Any]],
        metadata: dict[str, str],
        name: str | None = None,
        weight_name: str | None = None,
    ) -> list[Path]:
        """Write the LoRA in diffusers and kohya formats (as the config's output.formats ask); a LoHa or
        LoKr as one LyCORIS file whatever they ask.

        `layers` maps "unet"/"transformer"/"text_encoder"... to peft-format state dicts; the
        kohya file is `name` (default output.name).safetensors, laid out by the family's
        `kohya_layout`; the diffusers file `weight_name` (default pytorch_lora_weights.safetensors).
        """
        from studio.train.families.kohya import (
            DIFFUSERS_LORA_FILE,
            cast_layers,
            kohya_metadata,
            save_kohya_file,
        )

        cast = cast_layers(layers, self.config.output.save_precision)
        if self.config.method.network in ("loha", "lokr"):
            return [self.save_lycoris(folder, cast, adapter_configs, metadata, name)]
        written: list[Path] = []
        formats = self.config.output.formats
        if "diffusers" in formats or not formats:
            self.save_diffusers_lora(folder, weight_name or DIFFUSERS_LORA_FILE, cast, adapter_configs)
            written.append(folder / (weight_name or DIFFUSERS_LORA_FILE))
        if "kohya" in formats:
            state = self.kohya_layout(cast, adapter_configs)
            meta = kohya_metadata(self.config, self.kohya_base_version_name(), self.kohya_architecture_name(), metadata)
            written.append(save_kohya_file(folder, name or self.config.output.name, state, meta))
        return written

    def kohya_layout(self, layers: dict[str, dict[str, torch.Tensor]],
                     adapter_configs: dict[str, dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The kohya/ComfyUI file's tensors: sd-scripts' names (`lora_unet_*`, `lora_te*_*`) with the family's
        `kohya_renames`; a family whose readers want another layout (the original model's names) says so here."""
        from studio.train.families.kohya import kohya_state_dict

        return kohya_state_dict(layers, adapter_configs, renames=self.kohya_renames)

    def kohya_architecture_name(self) -> str:
        """The model-spec architecture of the kohya file (a family of several sizes adds its size)."""
        return self.kohya_architecture

    def kohya_base_version_name(self) -> str:
        """The kohya file's `ss_base_model_version` (a family of several model versions says the loaded one's)."""
        return self.kohya_base_version

    def save_lycoris(self, folder: Path, layers: dict[str, dict[str, torch.Tensor]],
                     adapter_configs: dict[str, dict[str, Any]], metadata: dict[str, str],
                     name: str | None = None) -> Path:
        """A LoHa or LoKr as one LyCORIS file, `name` (default output.name).safetensors: diffusers'
        `load_lora_weights` reads LoRA only, so this is the file for ComfyUI, A1111/Forge and sd-scripts
        whatever output.formats says. Each component's config holds its modules' scales (`lycoris_scales`)."""
        from studio.train.families.kohya import kohya_metadata, save_kohya_file
        from studio.train.networks.lycoris_file import lycoris_state_dict

        scales = {component: adapter_configs[component]["lycoris_scales"] for component in layers}
        state = lycoris_state_dict(layers, scales, namer=self.lycoris_name)
        meta = kohya_metadata(self.config, self.kohya_base_version_name(), self.kohya_architecture_name(), metadata)
        return save_kohya_file(folder, name or self.config.output.name, state, meta)

    def lycoris_name(self, component: str, module: str) -> str:
        """A module's name in the LyCORIS file: its kohya name (a family whose readers map other names
        says so here)."""
        from studio.train.networks.lycoris_file import kohya_module

        return kohya_module(component, module, self.kohya_renames)

    def save_diffusers_lora(
        self,
        folder: Path,
        weight_name: str,
        layers: dict[str, dict[str, torch.Tensor]],
        adapter_configs: dict[str, dict[str, Any]],
    ) -> None:
        """Write `folder/weight_name` with the family pipeline's `save_lora_weights`.

        Each trained component goes in as `<name>_lora_layers` with its `<name>_lora_adapter_metadata`,
        as every diffusers pipeline names them. The denoiser's keys are peft's (`.lora_A`/`.lora_B`) for every
        module: diffusers picks the conversion of a whole file from its first key, so a UNet file mixing
        `.lora.down` (the attention projections diffusers renames) with `.lora_A` (convolutions, feed-forward)
        lost half its layers. UNet-era text encoders get diffusers' renamed keys, which 0.3x needs, with the
        hub's `text_model.` level, which diffusers of every version reads.
        Each component's alpha / rank is in its up weights (networks/strength.py).
        """
        import diffusers
        from diffusers.utils import convert_state_dict_to_diffusers

        from studio.train.networks.dora import MAGNITUDE
        from studio.train.networks.strength import baked

        arguments: dict[str, Any] = {}
        for name in (self.denoiser_name, *self.text_encoder_names):
            if not layers.get(name):
                continue
            state, metadata = baked(layers[name], peft_metadata(adapter_configs.get(name)))
            if name in self.text_encoder_names:
                # A DoRA magnitude as the weight of its module (`...lora_magnitude_vector.weight`): transformers 5
                # loads a text encoder's adapter by that name only (peft's own loader reads both).
                state = {text_encoder_key(key) + (".weight" if key.endswith(f".{MAGNITUDE}") else ""): value
                         for key, value in state.items()}
            renamed = self.rename_lora_keys and name in self.text_encoder_names
            arguments[f"{name}_lora_layers"] = convert_state_dict_to_diffusers(state) if renamed else state
            arguments[f"{name}_lora_adapter_metadata"] = metadata
        pipeline = getattr(diffusers, declared_family(self.family).pipeline_class)
        pipeline.save_lora_weights(folder, weight_name=weight_name, **arguments)

    def save_full(self, folder: Path, components: Components, dtype: torch.dtype) -> list[Path]:
        """DreamBooth: the whole pipeline as a diffusers folder, its weights named as the hub names them."""
        pipeline = self.make_pipeline(components)
        pipeline.to(dtype=dtype)
        pipeline.save_pretrained(folder, safe_serialization=True)
        write_hub_layout(folder)
        return [folder]


def peft_metadata(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """A component's peft config as the diffusers file stores it (`lora_adapter_metadata`), without what the
    studio keeps beside it for the kohya and LyCORIS files (tensors, which the JSON metadata cannot hold)."""
    if config is None:
        return None
    return {key: value for key, value in config.items() if key not in ("dora_scales", "lycoris_scales")}


def draw_latents(distribution: Any, draws: list[torch.Generator] | None) -> torch.Tensor:
    """A sample of the VAE's latent distribution, one generator per image (drawn on the CPU, so a seed
    gives the same sample on any device); its mean without `draws`."""
    if draws is None:
        return distribution.mode()
    shape = distribution.mean.shape[1:]
    noise = torch.stack([torch.randn(shape, generator=draw, dtype=torch.float32) for draw in draws])
    return distribution.mean + distribution.std * noise.to(distribution.mean)
