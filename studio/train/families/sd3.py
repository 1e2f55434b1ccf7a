"""SD3 (medium / 3.5 architecture): the MMDiT transformer trained by flow matching.

Text conditioning as the SD3 pipeline builds it: both CLIP encoders' penultimate
hidden states side by side, zero-padded to the joint width, followed by the T5
tokens (or, with T5 dropped, as many zero tokens as the pipeline samples with), and
both CLIP pooled embeddings as the pooled projection.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

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
from studio.train.families.schemes import FlowMatchingScheme, NoiseScheme
from studio.train.memory.precision import input_dtype
from studio.train.memory.transfer import to_device

# The SD3 pipeline's default max_sequence_length: T5 tokens, or zero tokens when T5 is dropped.
T5_TOKENS = 256
ATTENTION_TARGETS = ["attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0",
                     "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj", "attn.to_add_out"]
NEEDS = {
    "text_encoder": "the CLIP ViT-L text encoder",
    "text_encoder_2": "the OpenCLIP bigG text encoder",
    "tokenizer": "the first CLIP tokenizer",
    "tokenizer_2": "the second CLIP tokenizer",
}
T5_NEEDS = {"text_encoder_3": "the T5-XXL text encoder", "tokenizer_3": "the T5 tokenizer"}


def sd3_architecture(config: Any) -> str:
    """The model-spec architecture of an SD3 transformer, as sd-scripts names them: SD3.5 medium (its blocks' second
    attention), SD3.5 large (38 blocks), else SD3 medium. Model sites and UIs file a LoRA under its base model by it."""
    if config.get("dual_attention_layers"):
        return "stable-diffusion-3-5-medium"
    if int(config.get("num_layers", 0)) == 38:
        return "stable-diffusion-3-5-large"
    return SD3Adapter.kohya_architecture


class SD3Adapter(FamilyAdapter):
    family: ClassVar[str] = "sd3"
    text_encoder_names: ClassVar[tuple[str, ...]] = ("text_encoder", "text_encoder_2")
    # The SD3 loader reads peft-format keys as they are (the old UNet-era renaming breaks it).
    rename_lora_keys: ClassVar[bool] = False
    # ComfyUI reads SD3 LoRAs named lora_transformer_* (lora_down/lora_up/alpha).
    kohya_base_version: ClassVar[str] = "sd3"
    kohya_architecture: ClassVar[str] = "stable-diffusion-3-medium"  # as sd-scripts names SD3 medium
    architecture = kohya_architecture  # the loaded base's (load): SD3.5 large and medium have names of their own

    prompt_embedding_names: ClassVar[tuple[str, ...]] = (
        "prompt_embeds", "negative_prompt_embeds", "pooled_prompt_embeds", "negative_pooled_prompt_embeds")

    joint_attention_dim = 4096
    blocks = 0  # the transformer's joint blocks (add_lora)
    block_layers: dict[int, list[str]]  # each joint block's layers by their full names (add_lora)

    def load(self, device: torch.device, weight_dtype: torch.dtype) -> Components:
        from diffusers import StableDiffusion3Pipeline

        model = self.config.model
        base = model.base
        use_t5 = model.use_t5
        dtypes = self.load_dtypes(weight_dtype)
        source = model_source(base, self.family, {**NEEDS, **(T5_NEEDS if use_t5 else {})})
        # Without T5 the pipeline is loaded without it: its 4.7 B parameters never reach memory.
        drop: dict[str, Any] = {} if use_t5 else {"text_encoder_3": None, "tokenizer_3": None}
        if source == "file":
            pipe = load_single_file(StableDiffusion3Pipeline, base, self.family, weight_dtype, use_t5, **drop)
        else:
            options: dict[str, Any] = {"revision": model.revision, "variant": model.variant,
                                       **folder_dtypes(dtypes), **hub_options(base, model.revision, model.variant)}
            pipe = load_or_fail("pipeline", base, lambda: StableDiffusion3Pipeline.from_pretrained(
                base, **drop, **options))
        if use_t5 and pipe.text_encoder_3 is None:
            raise TrainError("model", f"{base} has no T5 text encoder (text_encoder_3), but model.use_t5 is true",
                             "set model.use_t5 = false to train with the two CLIP encoders only", path=base)
        vae: Any = load_vae(model.vae, self.family) if model.vae else pipe.vae
        transformer = pipe.transformer
        self.joint_attention_dim = int(transformer.config.joint_attention_dim)
        self.architecture = sd3_architecture(transformer.config)
        encoders = [pipe.text_encoder, pipe.text_encoder_2, *([pipe.text_encoder_3] if use_t5 else [])]
        tokenizers = [pipe.tokenizer, pipe.tokenizer_2, *([pipe.tokenizer_3] if use_t5 else [])]
        self.place_frozen(transformer, vae, encoders, device, weight_dtype, dtypes)
        return Components(transformer, vae, encoders, tokenizers, pipe.scheduler, pipe.scheduler)

    def kohya_architecture_name(self) -> str:
        return self.architecture

    def default_lora_targets(self) -> list[str]:
        return list(ATTENTION_TARGETS)

    def lora_targets(self) -> list[str]:
        targets = super().lora_targets()
        blocks = self.config.method.blocks
        if not blocks:
            return targets
        # Each name matched inside the chosen blocks as it is matched without them (a layer's path or its end): a
        # bare "to_q" became transformer_blocks.N.to_q, which names no layer (the run ended with a traceback, or
        # trained the other names only without a word).
        inside = [name for block in sorted(set(blocks)) for name in self.block_layers.get(block, [])
                  if any(name == f"transformer_blocks.{block}.{target}" or name.endswith(f".{target}")
                         for target in targets)]
        if not inside:
            raise TrainError("config", f"method.target_modules ({', '.join(targets)}) names no layer inside the "
                             f"blocks method.blocks chooses ({', '.join(map(str, sorted(set(blocks))))})",
                             "name layers of the joint blocks (attn.to_q, attn.to_out.0, ff.net.2), or leave "
                             "method.blocks empty to train layers outside them")
        return inside

    def add_lora(self, components: Components) -> None:
        count = len(getattr(components.denoiser, "transformer_blocks", []))
        wrong = [b for b in self.config.method.blocks if not 0 <= b < count]
        if wrong:
            raise TrainError("config", f"method.blocks = {self.config.method.blocks} names blocks the transformer "
                             f"does not have ({wrong}); it has {count} blocks",
                             f"use block indices from 0 to {count - 1}, or leave method.blocks empty for all")
        self.blocks = count
        self.block_layers = {index: [f"transformer_blocks.{index}.{name}" for name, _ in block.named_modules() if name]
                             for index, block in enumerate(getattr(components.denoiser, "transformer_blocks", []))}
        super().add_lora(components)

    def kohya_layout(self, layers: dict[str, dict[str, torch.Tensor]],
                     adapter_configs: dict[str, dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The kohya file (`lora_transformer_*`). ComfyUI holds the final modulation and the last block's text
        modulation with their shift and scale halves swapped (comfy/utils.py `mmdit_to_diffusers`): it swaps a LoRA's
        change to match, but not a DoRA layer's dora_scale (one per output row), so those are written swapped."""
        from studio.train.networks.dora import DORA_SCALE

        state = super().kohya_layout(layers, adapter_configs)
        for module in ("norm_out.linear", f"transformer_blocks.{self.blocks - 1}.norm1_context.linear"):
            key = f"lora_transformer_{module.replace('.', '_')}.{DORA_SCALE}"
            if key in state:
                first, second = state[key].chunk(2)
                state[key] = torch.cat([second, first]).contiguous()
        return state

    def encode_prompt_arguments(self, prompt: str) -> dict[str, Any]:
        return {"prompt": prompt, "prompt_2": None, "prompt_3": None}

    def trainable_encoders(self, components: Components) -> list[torch.nn.Module]:
        return list(components.text_encoders[:2])  # T5 stays frozen: it is too large to train here

    def encode_prompts(self, components: Components, captions: list[str]) -> Conditioning:
        hidden, pooled = [], []
        for tokenizer, encoder in zip(components.tokenizers[:2], components.text_encoders[:2], strict=True):
            ids = to_device(tokenizer(
                captions, padding="max_length", max_length=tokenizer.model_max_length,
                truncation=True, return_tensors="pt",
            ).input_ids, next(encoder.parameters()).device)
            out = encoder(ids, output_hidden_states=True)
            pooled.append(out[0])
            hidden.append(out.hidden_states[-2])
        cond = {"clip_embeds": torch.cat(hidden, dim=-1), "pooled_projections": torch.cat(pooled, dim=-1)}
        if len(components.text_encoders) > 2:
            tokenizer, encoder = components.tokenizers[2], components.text_encoders[2]
            ids = tokenizer(captions, padding="max_length", max_length=T5_TOKENS, truncation=True,
                            add_special_tokens=True, return_tensors="pt").input_ids
            cond["t5_embeds"] = encoder(to_device(ids, next(encoder.parameters()).device))[0]
        return cond

    def noise_scheme(self, components: Components) -> NoiseScheme:
        return FlowMatchingScheme(components.scheduler, self.config.training)

    def joint_states(self, cond: Conditioning) -> torch.Tensor:
        """The transformer's text tokens: padded CLIP states, then T5 tokens (zeros without T5)."""
        clip = cond["clip_embeds"]
        clip = F.pad(clip, (0, self.joint_attention_dim - clip.shape[-1]))
        t5 = cond.get("t5_embeds")
        if t5 is None:
            t5 = clip.new_zeros((clip.shape[0], T5_TOKENS, self.joint_attention_dim))
        return torch.cat([clip, t5.to(clip.dtype)], dim=-2)

    def predict(
        self, denoiser: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, cond: Conditioning
    ) -> torch.Tensor:
        dtype = input_dtype(denoiser, noisy.device)
        # Cast before joining: fp16 embeddings in a bf16 autocast cannot be concatenated.
        cond = {key: value.to(dtype) for key, value in cond.items()}
        out = denoiser(hidden_states=noisy.to(dtype), timestep=timesteps, encoder_hidden_states=self.joint_states(cond),
                       pooled_projections=cond["pooled_projections"], return_dict=False)
        return out[0]

    def make_pipeline(self, components: Components) -> Any:
        from diffusers import StableDiffusion3Pipeline

        encoders, tokenizers = components.text_encoders, components.tokenizers
        return StableDiffusion3Pipeline(
            transformer=components.denoiser, scheduler=components.sample_scheduler, vae=components.vae,
            text_encoder=encoders[0], tokenizer=tokenizers[0], text_encoder_2=encoders[1], tokenizer_2=tokenizers[1],
            text_encoder_3=encoders[2] if len(encoders) > 2 else None,
            tokenizer_3=tokenizers[2] if len(tokenizers) > 2 else None,
        )

    def save_full(self, folder: Path, components: Components, dtype: torch.dtype) -> list[Path]:
        """The fine-tuned pipeline; a T5 left out of training is copied from the base folder."""
        written = super().save_full(folder, components, dtype)
        base = Path(self.config.model.base)
        if self.config.model.use_t5 or not (base / "text_encoder_3").is_dir():
            return written
        for name in ("text_encoder_3", "tokenizer_3"):
            if (base / name).is_dir():
                shutil.copytree(base / name, folder / name, dirs_exist_ok=True)
        base_index = json.loads((base / "model_index.json").read_text(encoding="utf-8"))
        index_path = folder / "model_index.json"
        index = json.loads(index_path.read_text(encoding="utf-8"))
        for name in ("text_encoder_3", "tokenizer_3"):
            index[name] = base_index.get(name, index.get(name))
        index_path.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        return written


ADAPTER = SD3Adapter
