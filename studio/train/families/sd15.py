"""Stable Diffusion 1.x / 2.x: one CLIP text encoder, a UNet, epsilon or v-prediction."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from studio.train.components import Components
from studio.train.errors import TrainError
from studio.train.families.base import Conditioning, FamilyAdapter
from studio.train.families.loading import (
    folder_dtypes,
    hub_options,
    load_or_fail,
    load_single_file,
    load_vae,
    model_source,
)
from studio.train.families.schemes import DiffusionScheme, NoiseScheme
from studio.train.memory.precision import input_dtype
from studio.train.memory.transfer import to_device
from studio.train.pipelines.single_file import is_open_clip


class SD15Adapter(FamilyAdapter):
    family: ClassVar[str] = "sd15"
    kohya_base_version: ClassVar[str] = "sd_v1"
    kohya_architecture: ClassVar[str] = "stable-diffusion-v1"
    # SD1.x has a single text encoder, which kohya names lora_te_ (lora_te1_ is SDXL's).
    kohya_renames: ClassVar[dict[str, str]] = {"lora_te1_": "lora_te_"}
    # What the loaded base is (load): SD 2.x (its OpenCLIP text encoder), and whether it predicts v.
    version_2 = False
    v_prediction = False

    def load(self, device: torch.device, weight_dtype: torch.dtype) -> Components:
        from diffusers import DDPMScheduler, StableDiffusionPipeline

        model = self.config.model
        base = model.base
        dtypes = self.load_dtypes(weight_dtype)
        source = model_source(base, self.family, {"text_encoder": "the CLIP text encoder", "tokenizer": "the CLIP tokenizer"})
        options: dict[str, Any] = {"revision": model.revision, "variant": model.variant,
                                   **folder_dtypes(dtypes), **hub_options(base, model.revision, model.variant)}
        if source == "file":
            pipe = load_single_file(StableDiffusionPipeline, base, self.family, weight_dtype, safety_checker=None,
                                    requires_safety_checker=False)
            unet, vae, text_encoder = pipe.unet, pipe.vae, pipe.text_encoder
            tokenizer, sample_scheduler = pipe.tokenizer, pipe.scheduler
            scheduler = DDPMScheduler.from_config(pipe.scheduler.config)
        else:
            pipe = load_or_fail("pipeline", base, lambda: StableDiffusionPipeline.from_pretrained(
                base, safety_checker=None, requires_safety_checker=False, **options))
            unet, vae, text_encoder = pipe.unet, pipe.vae, pipe.text_encoder
            tokenizer, sample_scheduler = pipe.tokenizer, pipe.scheduler
            scheduler = load_or_fail("scheduler", base, lambda: DDPMScheduler.from_pretrained(
                base, subfolder="scheduler", revision=model.revision, **hub_options(base, model.revision)))
        if model.vae:
            vae = load_vae(model.vae, self.family)
        if model.prediction_type != "auto":
            scheduler.register_to_config(prediction_type=model.prediction_type)
            sample_scheduler.register_to_config(prediction_type=model.prediction_type)
        self.version_2 = is_open_clip(text_encoder)
        self.v_prediction = scheduler.config.prediction_type == "v_prediction"
        self.place_frozen(unet, vae, [text_encoder], device, weight_dtype, dtypes)
        return Components(unet, vae, [text_encoder], [tokenizer], scheduler, sample_scheduler)

    def kohya_architecture_name(self) -> str:
        """SD 2.x's model-spec architecture for a 2.x base (as sd-scripts names it: 512 epsilon, 768 v); A1111/Forge
        and SD.Next list a file as their model's by it and by the base version."""
        if not self.version_2:
            return self.kohya_architecture
        return "stable-diffusion-v2-768-v" if self.v_prediction else "stable-diffusion-v2-512"

    def kohya_base_version_name(self) -> str:
        return "sd_v2" if self.version_2 else self.kohya_base_version

    def default_lora_targets(self) -> list[str]:
        return ["to_q", "to_k", "to_v", "to_out.0"]

    def encode_prompts(self, components: Components, captions: list[str]) -> Conditioning:
        return {"encoder_hidden_states": self._encode(components.tokenizers[0], components.text_encoders[0], captions)}

    def _encode(self, tokenizer: Any, encoder: Any, captions: list[str]) -> torch.Tensor:
        ids = to_device(tokenizer(
            captions, padding="max_length", max_length=tokenizer.model_max_length,
            truncation=True, return_tensors="pt",
        ).input_ids, next(encoder.parameters()).device)
        skip = self.config.model.clip_skip
        if skip == 1:
            return encoder(ids, return_dict=False)[0]
        inner = getattr(encoder, "module", encoder)  # the model inside a data-parallel wrapper (several GPUs)
        layers = inner.config.num_hidden_layers
        if skip > layers:
            raise TrainError("config", f"model.clip_skip = {skip}, but the text encoder has {layers} layers",
                             f"set model.clip_skip between 1 and {layers} (2 is the usual choice)")
        # As kohya and A1111 do: the hidden state `skip` layers from the end, through the final layer norm.
        hidden = encoder(ids, output_hidden_states=True, return_dict=True).hidden_states[-skip]
        return getattr(inner, "text_model", inner).final_layer_norm(hidden)

    def unused_encoder_parts(self, index: int, encoder: torch.nn.Module) -> list[torch.nn.Module]:
        """With model.clip_skip = N the last N - 1 layers feed nothing: no LoRA on them, and a full fine-tune
        leaves them frozen."""
        skip = self.config.model.clip_skip
        text_model: Any = getattr(encoder, "text_model", encoder)
        layers = text_model.encoder.layers
        return list(layers[len(layers) - skip + 1:]) if 1 < skip <= len(layers) else []

    def sample_conditioning(self, pipeline: Any, prompt: str, negative: str) -> Conditioning:
        """With clip_skip the samples get the embeddings training uses, not the pipeline's own."""
        if self.config.model.clip_skip == 1:
            return super().sample_conditioning(pipeline, prompt, negative)
        encode = self._encode
        return {"prompt_embeds": encode(pipeline.tokenizer, pipeline.text_encoder, [prompt]),
                "negative_prompt_embeds": encode(pipeline.tokenizer, pipeline.text_encoder, [negative])}

    def noise_scheme(self, components: Components) -> NoiseScheme:
        return DiffusionScheme(components.scheduler, self.config.training)

    def predict(
        self, denoiser: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, cond: Conditioning
    ) -> torch.Tensor:
        hidden = cond["encoder_hidden_states"]
        dtype = input_dtype(denoiser, noisy.device)
        out = denoiser(noisy.to(dtype), timesteps, encoder_hidden_states=hidden.to(dtype), return_dict=False)
        return out[0]

    def make_pipeline(self, components: Components) -> Any:
        from diffusers import StableDiffusionPipeline

        return StableDiffusionPipeline(
            vae=components.vae, text_encoder=components.text_encoders[0], tokenizer=components.tokenizers[0],
            unet=components.denoiser, scheduler=components.sample_scheduler,
            safety_checker=None, feature_extractor=None, requires_safety_checker=False,
        )


ADAPTER = SD15Adapter
