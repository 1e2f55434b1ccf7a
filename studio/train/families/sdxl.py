"""SDXL (base 1.0 architecture): two CLIP text encoders, a UNet with size and crop conditioning.

The text conditioning is both encoders' penultimate hidden states side by side plus
the second encoder's pooled embedding; the micro-conditioning ("time ids") is each
image's original size, its crop's top-left corner and the target size.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from studio.train.components import Components
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

NEEDS = {
    "text_encoder": "the CLIP ViT-L text encoder",
    "text_encoder_2": "the OpenCLIP bigG text encoder",
    "tokenizer": "the first text encoder's tokenizer",
    "tokenizer_2": "the second text encoder's tokenizer",
}


def time_ids(batch: dict[str, Any], device: torch.device) -> torch.Tensor:
    """(batch, 6): original (h, w), crop top-left (top, left), target (h, w) of every image."""
    target = list(batch["target_size"])
    rows = [[*original, *crop, *target]
            for original, crop in zip(batch["original_sizes"], batch["crops_top_left"], strict=True)]
    return to_device(torch.tensor(rows, dtype=torch.float32), device)


class SDXLAdapter(FamilyAdapter):
    family: ClassVar[str] = "sdxl"
    text_encoder_names: ClassVar[tuple[str, ...]] = ("text_encoder", "text_encoder_2")
    kohya_base_version: ClassVar[str] = "sdxl_base_v1-0"
    kohya_architecture: ClassVar[str] = "stable-diffusion-xl-v1-base"
    prompt_embedding_names: ClassVar[tuple[str, ...]] = (
        "prompt_embeds", "negative_prompt_embeds", "pooled_prompt_embeds", "negative_pooled_prompt_embeds")

    def add_lora(self, components: Components) -> None:
        self.read_layout(components.denoiser)
        super().add_lora(components)

    def read_layout(self, unet: torch.nn.Module) -> None:
        """Learn the UNet's block layout (its config), which the LyCORIS file's original names follow."""
        from studio.train.pipelines.single_file import original_unet_names

        self.original_unet_name = original_unet_names(unet.config)

    def lycoris_name(self, component: str, module: str) -> str:
        """The UNet's layers under their original (SGM) names, `lora_unet_input_blocks_4_1_...`, as A1111/Forge
        and sd-scripts name an SDXL model's layers (sd-scripts converts diffusers names only where it loads its own
        LoRA network for generation) and ComfyUI finds any layer; the text encoders as kohya names them."""
        if component != self.denoiser_name:
            return super().lycoris_name(component, module)
        return "lora_unet_" + self.original_unet_name(module).replace(".", "_")

    def kohya_layout(self, layers: dict[str, dict[str, torch.Tensor]],
                     adapter_configs: dict[str, dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The kohya file with the UNet's layers under their original names too, as sd-scripts writes an SDXL LoRA:
        its merge into a checkpoint (sdxl_merge_lora.py) and its training on from a LoRA's weights
        (--network_weights) find the UNet's layers by those names only, and skipped every one of a file in diffusers
        names without an error (the text encoders alone merged); A1111 placed the first upsampler of a LoCon by
        SD1.x's layout and dropped it. ComfyUI and Forge read both."""
        state = super().kohya_layout(layers, adapter_configs)
        modules = {key.rsplit(".lora_", 1)[0] for key in layers.get(self.denoiser_name, {})}
        original = {"lora_unet_" + module.replace(".", "_"): self.lycoris_name(self.denoiser_name, module)
                    for module in modules}
        out: dict[str, torch.Tensor] = {}
        for key, value in state.items():
            name, _, part = key.partition(".")
            out[f"{original.get(name, name)}.{part}"] = value
        return out

    def load(self, device: torch.device, weight_dtype: torch.dtype) -> Components:
        from diffusers import DDPMScheduler, StableDiffusionXLPipeline

        model = self.config.model
        base = model.base
        dtypes = self.load_dtypes(weight_dtype)
        source = model_source(base, self.family, NEEDS)
        if source == "file":
            pipe = load_single_file(StableDiffusionXLPipeline, base, self.family, weight_dtype, add_watermarker=False)
            scheduler = DDPMScheduler.from_config(pipe.scheduler.config)
        else:
            options: dict[str, Any] = {"revision": model.revision, "variant": model.variant,
                                       **folder_dtypes(dtypes), **hub_options(base, model.revision, model.variant)}
            pipe = load_or_fail("pipeline", base, lambda: StableDiffusionXLPipeline.from_pretrained(
                base, add_watermarker=False, **options))
            scheduler = load_or_fail("scheduler", base, lambda: DDPMScheduler.from_pretrained(
                base, subfolder="scheduler", revision=model.revision, **hub_options(base, model.revision)))
        vae: Any = load_vae(model.vae, self.family) if model.vae else pipe.vae
        sample_scheduler = pipe.scheduler
        if model.prediction_type != "auto":
            scheduler.register_to_config(prediction_type=model.prediction_type)
            sample_scheduler.register_to_config(prediction_type=model.prediction_type)
        encoders = [pipe.text_encoder, pipe.text_encoder_2]
        self.place_frozen(pipe.unet, vae, encoders, device, weight_dtype, dtypes)
        return Components(pipe.unet, vae, encoders, [pipe.tokenizer, pipe.tokenizer_2], scheduler, sample_scheduler)

    def default_lora_targets(self) -> list[str]:
        return ["to_q", "to_k", "to_v", "to_out.0"]

    def unused_encoder_parts(self, index: int, encoder: torch.nn.Module) -> list[torch.nn.Module]:
        """The first encoder's last layer and final layer norm feed nothing SDXL reads (it takes the penultimate
        hidden states and no pooled output): they get no LoRA, and a full fine-tune leaves them frozen."""
        if index != 0:
            return []
        text_model: Any = getattr(encoder, "text_model", encoder)
        return [text_model.encoder.layers[-1], text_model.final_layer_norm]

    def encode_prompts(self, components: Components, captions: list[str]) -> Conditioning:
        hidden, pooled = [], None
        for tokenizer, encoder in zip(components.tokenizers, components.text_encoders, strict=True):
            ids = to_device(tokenizer(
                captions, padding="max_length", max_length=tokenizer.model_max_length,
                truncation=True, return_tensors="pt",
            ).input_ids, next(encoder.parameters()).device)
            out = encoder(ids, output_hidden_states=True)
            pooled = out[0]  # the last encoder's projected pooled embedding is the one SDXL uses
            hidden.append(out.hidden_states[-2])
        assert pooled is not None
        return {"prompt_embeds": torch.cat(hidden, dim=-1), "pooled_prompt_embeds": pooled}

    def extra_conditioning(self, batch: dict[str, Any], cond: Conditioning, device: torch.device) -> Conditioning:
        return {**cond, "time_ids": time_ids(batch, device)}

    def noise_scheme(self, components: Components) -> NoiseScheme:
        return DiffusionScheme(components.scheduler, self.config.training)

    def predict(
        self, denoiser: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, cond: Conditioning
    ) -> torch.Tensor:
        dtype = input_dtype(denoiser, noisy.device)
        added = {"text_embeds": cond["pooled_prompt_embeds"].to(dtype), "time_ids": cond["time_ids"].to(dtype)}
        out = denoiser(noisy.to(dtype), timesteps, encoder_hidden_states=cond["prompt_embeds"].to(dtype),
                       added_cond_kwargs=added, return_dict=False)
        return out[0]

    def make_pipeline(self, components: Components) -> Any:
        from diffusers import StableDiffusionXLPipeline

        first, second = components.text_encoders
        return StableDiffusionXLPipeline(
            vae=components.vae, text_encoder=first, text_encoder_2=second,
            tokenizer=components.tokenizers[0], tokenizer_2=components.tokenizers[1],
            unet=components.denoiser, scheduler=components.sample_scheduler, add_watermarker=False,
        )


ADAPTER = SDXLAdapter
