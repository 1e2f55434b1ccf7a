"""Stable Diffusion 1.x / 2.x: one CLIP text encoder, a UNet, epsilon or v-prediction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import torch

from studio.train.families.base import Components, Conditioning, FamilyAdapter
from studio.train.families.loading import load_or_fail, model_source
from studio.train.families.schemes import DiffusionScheme, NoiseScheme

DIFFUSERS_LORA_FILE = "pytorch_lora_weights.safetensors"
_SAVE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class SD15Adapter(FamilyAdapter):
    family: ClassVar[str] = "sd15"
    kohya_architecture: ClassVar[str] = "stable-diffusion-v1"

    def load(self, device: torch.device, weight_dtype: torch.dtype) -> Components:
        from diffusers import AutoencoderKL, DDPMScheduler, StableDiffusionPipeline

        model = self.config.model
        base = model.base
        source = model_source(base, self.family)
        options: dict[str, Any] = {"revision": model.revision, "variant": model.variant}
        if source == "file":
            pipe = load_or_fail("checkpoint", base, lambda: StableDiffusionPipeline.from_single_file(
                base, local_files_only=True, safety_checker=None, requires_safety_checker=False))
            unet, vae, text_encoder = pipe.unet, pipe.vae, pipe.text_encoder
            tokenizer, sample_scheduler = pipe.tokenizer, pipe.scheduler
            scheduler = DDPMScheduler.from_config(pipe.scheduler.config)
        else:
            pipe = load_or_fail("pipeline", base, lambda: StableDiffusionPipeline.from_pretrained(
                base, safety_checker=None, requires_safety_checker=False, **options))
            unet, vae, text_encoder = pipe.unet, pipe.vae, pipe.text_encoder
            tokenizer, sample_scheduler = pipe.tokenizer, pipe.scheduler
            scheduler = load_or_fail("scheduler", base, lambda: DDPMScheduler.from_pretrained(
                base, subfolder="scheduler", revision=model.revision))
        if model.vae:
            vae_path = model.vae
            vae = load_or_fail("VAE", vae_path, lambda: AutoencoderKL.from_pretrained(vae_path))
        if model.prediction_type != "auto":
            scheduler.register_to_config(prediction_type=model.prediction_type)
            sample_scheduler.register_to_config(prediction_type=model.prediction_type)
        for module in (unet, vae, text_encoder):
            module.requires_grad_(False)
        # SD's VAE overflows in fp16; it stays in fp32 then.
        vae_dtype = torch.float32 if weight_dtype == torch.float16 else weight_dtype
        for module, dtype in ((vae, vae_dtype), (text_encoder, weight_dtype), (unet, weight_dtype)):
            module.to(device)
            if module.dtype != dtype:
                module.to(dtype=dtype)
        return Components(unet, vae, [text_encoder], [tokenizer], scheduler, sample_scheduler)

    def default_lora_targets(self) -> list[str]:
        return ["to_q", "to_k", "to_v", "to_out.0"]

    def encode_prompts(self, components: Components, captions: list[str]) -> Conditioning:
        tokenizer, encoder = components.tokenizers[0], components.text_encoders[0]
        ids = tokenizer(
            captions, padding="max_length", max_length=tokenizer.model_max_length,
            truncation=True, return_tensors="pt",
        ).input_ids.to(next(encoder.parameters()).device)
        return {"encoder_hidden_states": encoder(ids, return_dict=False)[0]}

    def encode_images(self, components: Components, pixels: torch.Tensor) -> torch.Tensor:
        vae: Any = components.vae
        # The distribution's mean: deterministic, so cached and uncached latents agree.
        latents = vae.encode(pixels.to(vae.device, vae.dtype)).latent_dist.mode()
        return latents * vae.config.scaling_factor

    def noise_scheme(self, components: Components) -> NoiseScheme:
        return DiffusionScheme(components.scheduler, self.config.training)

    def predict(
        self, denoiser: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, cond: Conditioning
    ) -> torch.Tensor:
        hidden = cond["encoder_hidden_states"]
        param = next(denoiser.parameters())
        out = denoiser(noisy.to(param.dtype), timesteps, encoder_hidden_states=hidden.to(param.dtype),
                       return_dict=False)
        return out[0]

    def make_pipeline(self, components: Components) -> Any:
        from diffusers import StableDiffusionPipeline

        return StableDiffusionPipeline(
            vae=components.vae, text_encoder=components.text_encoders[0], tokenizer=components.tokenizers[0],
            unet=components.denoiser, scheduler=components.sample_scheduler,
            safety_checker=None, feature_extractor=None, requires_safety_checker=False,
        )

    def save_lora(
        self,
        folder: Path,
        layers: dict[str, dict[str, torch.Tensor]],
        metadata: dict[str, str],
        adapter_configs: dict[str, dict[str, Any]],
    ) -> list[Path]:
        from diffusers import StableDiffusionPipeline
        from diffusers.utils import convert_state_dict_to_diffusers

        dtype = _SAVE_DTYPES[self.config.output.save_precision]
        cast = {name: {k: v.detach().to("cpu", dtype) for k, v in sd.items()} for name, sd in layers.items()}
        written: list[Path] = []
        formats = self.config.output.formats
        if "diffusers" in formats or not formats:
            te = cast.get("text_encoder")
            StableDiffusionPipeline.save_lora_weights(
                folder,
                unet_lora_layers=convert_state_dict_to_diffusers(cast["unet"]),
                text_encoder_lora_layers=convert_state_dict_to_diffusers(te) if te else None,
                weight_name=DIFFUSERS_LORA_FILE,
                unet_lora_adapter_metadata=adapter_configs.get("unet"),
                text_encoder_lora_adapter_metadata=adapter_configs.get("text_encoder") if te else None,
            )
            written.append(folder / DIFFUSERS_LORA_FILE)
        if "kohya" in formats:
            written.append(self.save_kohya(folder, cast, metadata, adapter_configs))
        return written

    def save_kohya(
        self,
        folder: Path,
        layers: dict[str, dict[str, torch.Tensor]],
        metadata: dict[str, str],
        adapter_configs: dict[str, dict[str, Any]],
    ) -> Path:
        """The `lora_unet_*` / `lora_te_*` file ComfyUI and A1111/Forge read."""
        from diffusers.utils import convert_state_dict_to_kohya
        from safetensors.torch import save_file

        prefixed = {f"{name}.{_clip_key(name, key)}": value for name, sd in layers.items() for key, value in sd.items()}
        kohya = convert_state_dict_to_kohya(prefixed)
        out: dict[str, torch.Tensor] = {}
        for key, value in kohya.items():
            # SD1.x has a single text encoder, which kohya names lora_te_ (lora_te1_ is SDXL's).
            key = key.replace("lora_te1_", "lora_te_")
            if key.endswith(".alpha"):
                owner = "unet" if key.startswith("lora_unet_") else "text_encoder"
                alpha = float(adapter_configs.get(owner, {}).get("lora_alpha", value.item()))
                value = torch.tensor(alpha)
            out[key] = value.contiguous()
        name = self.config.output.name
        path = folder / f"{name}.safetensors"
        if path.name == DIFFUSERS_LORA_FILE:
            path = folder / f"{name}-kohya.safetensors"
        meta = {
            "ss_network_module": "networks.lora",
            "ss_network_dim": str(self.config.method.rank),
            "ss_network_alpha": str(self.config.method.lora_alpha),
            "ss_base_model_version": "sd_v1",
            "modelspec.architecture": f"{self.kohya_architecture}/lora",
            "modelspec.sai_model_spec": "1.0.0",
            **metadata,
        }
        save_file(out, str(path), metadata={k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()})
        return path


def _clip_key(component: str, key: str) -> str:
    """Kohya names follow the original CLIP layout (text_model.encoder...), which newer
    transformers versions flatten away; put the prefix back for text encoders."""
    if component.startswith("text_encoder") and not key.startswith("text_model."):
        return f"text_model.{key}"
    return key


ADAPTER = SD15Adapter
