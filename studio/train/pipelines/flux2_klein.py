"""FLUX.2 [klein] pipelines built offline: tiny (tests, the demo) and full size (meta device, counts).

The full-size configurations are the published ones of the hub folders
black-forest-labs/FLUX.2-klein-4B and -9B (their base variants share the shapes):

- transformer 4B: the `transformer/config.json` of the diffusers folder (as mirrored by
  YuCollection/FLUX.2-klein-base-4B-Diffusers): 24 heads x 128, 5 double-stream and 20
  single-stream blocks, joint_attention_dim 7680, no guidance embedding.
- transformer 9B: hidden width 4096 (32 heads x 128), 8 double and 24 single blocks, as
  the model's description gives them; joint_attention_dim is three Qwen3-8B layers
  (3 x 4096 = 12288), as for the 4B (3 x 2560 = 7680).
- VAE (both): `vae/config.json` of FLUX.2-klein-4B / -base-9B: AutoencoderKLFlux2, 32 latent
  channels, blocks 128/256/512/512, patch 2x2, batch-norm eps 1e-4.
- text encoder: `text_encoder/config.json`: Qwen3ForCausalLM, Qwen3-4B for the 4B (hidden 2560,
  36 layers, MLP 9728, 32 heads / 8 KV heads of 128, tied embeddings) and Qwen3-8B for the 9B
  (hidden 4096, MLP 12288, untied), vocabulary 151936.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VARIANTS = ("4b", "9b")
TRANSFORMER: dict[str, dict[str, Any]] = {
    "4b": {"patch_size": 1, "in_channels": 128, "num_layers": 5, "num_single_layers": 20,
           "attention_head_dim": 128, "num_attention_heads": 24, "joint_attention_dim": 7680,
           "timestep_guidance_channels": 256, "mlp_ratio": 3.0, "axes_dims_rope": (32, 32, 32, 32),
           "rope_theta": 2000, "eps": 1e-6, "guidance_embeds": False},
    "9b": {"patch_size": 1, "in_channels": 128, "num_layers": 8, "num_single_layers": 24,
           "attention_head_dim": 128, "num_attention_heads": 32, "joint_attention_dim": 12288,
           "timestep_guidance_channels": 256, "mlp_ratio": 3.0, "axes_dims_rope": (32, 32, 32, 32),
           "rope_theta": 2000, "eps": 1e-6, "guidance_embeds": False},
}
VAE: dict[str, Any] = {
    "in_channels": 3, "out_channels": 3, "latent_channels": 32, "layers_per_block": 2,
    "block_out_channels": (128, 256, 512, 512), "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4, "norm_num_groups": 32, "sample_size": 1024,
    "use_quant_conv": True, "use_post_quant_conv": True, "batch_norm_eps": 1e-4, "batch_norm_momentum": 0.1,
    "patch_size": (2, 2),
}
QWEN3: dict[str, dict[str, Any]] = {
    "4b": {"vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
           "rope_theta": 1000000, "rms_norm_eps": 1e-6, "tie_word_embeddings": True},
    "9b": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
           "rope_theta": 1000000, "rms_norm_eps": 1e-6, "tie_word_embeddings": False},
}
# The [klein] scheduler: FLUX.2's flow-matching Euler with resolution-dependent shifting at sampling
# time (the pipeline passes mu); training draws from the unshifted schedule, as diffusers' example does.
SCHEDULER: dict[str, Any] = {"num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True,
                             "base_shift": 0.5, "max_shift": 1.15, "base_image_seq_len": 256,
                             "max_image_seq_len": 4096, "time_shift_type": "exponential"}
# The pipeline's prompt embedding: hidden states after these Qwen3 layers, side by side.
TEXT_LAYERS = (9, 18, 27)
TINY_TOKENS = 128


def full_size_components(variant: str | None, device: str | torch.device = "meta") -> dict[str, Any]:
    """The transformer, VAE and Qwen3 text encoder of a [klein] variant at full size (the 4B when None)."""
    from diffusers import AutoencoderKLFlux2, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    variant = variant or VARIANTS[0]
    if variant not in VARIANTS:
        raise ValueError(f"unknown FLUX.2 [klein] size {variant!r}; choose from {', '.join(VARIANTS)}")
    with torch.device(device):
        return {
            "transformer": Flux2Transformer2DModel(**TRANSFORMER[variant]),
            "vae": AutoencoderKLFlux2(**VAE),
            "text_encoder": Qwen3ForCausalLM(Qwen3Config(**QWEN3[variant])),
        }


def build_tiny_flux2_klein(folder: Path, seed: int) -> Path:
    """[klein]'s structure in miniature: a 28-layer narrow Qwen3 (so layers 9, 18 and 27 exist, as the
    pipeline reads them), a Flux2 transformer with double- and single-stream blocks, a Flux.2 VAE
    with its batch-norm statistics set, and the [klein] scheduler."""
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from studio.core.dataset.demo_shapes import CAPTION_WORDS
    from studio.train.pipelines.flux2_klein_tokenizer import write_qwen_tokenizer
    from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS

    tokenizer = write_qwen_tokenizer(folder / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], TINY_TOKENS)
    torch.manual_seed(seed)
    hidden = 16
    text_encoder = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=32, num_hidden_layers=28,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=TINY_TOKENS,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
    ))
    latent_channels = 8
    transformer = Flux2Transformer2DModel(
        patch_size=1, in_channels=4 * latent_channels, num_layers=1, num_single_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=3 * hidden, timestep_guidance_channels=32, mlp_ratio=2.0,
        axes_dims_rope=(4, 4, 4, 4), guidance_embeds=False,
    )
    vae: Any = AutoencoderKLFlux2(
        in_channels=3, out_channels=3, latent_channels=latent_channels, layers_per_block=1,
        block_out_channels=(8, 16, 32, 32), down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=8, sample_size=64,
        use_quant_conv=True, use_post_quant_conv=True, patch_size=(2, 2),
    )
    with torch.no_grad():  # statistics away from (0, 1), so the normalisation is exercised
        vae.bn.running_mean.uniform_(-0.2, 0.2)
        vae.bn.running_var.uniform_(0.5, 2.0)
    pipeline: Any = Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae, text_encoder=text_encoder,
        tokenizer=tokenizer, transformer=transformer, is_distilled=False,
    )
    pipeline.save_pretrained(folder, safe_serialization=True)
    return folder


build_tiny = build_tiny_flux2_klein  # what studio.train.pipelines.tiny builds for the family


def write_full_size_flux2_klein(variant: str, folder: str | Path, dtype: torch.dtype, seed: int = 0,
                                device: str = "cpu") -> Path:
    """A loadable full-size [klein] folder with random weights (4B: about 16 GB in bf16) and the tiny
    tokenizer (its ids stay inside the real vocabulary)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline

    from studio.core.dataset.demo_shapes import CAPTION_WORDS
    from studio.train.pipelines.flux2_klein_tokenizer import write_qwen_tokenizer
    from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS

    out = Path(folder)
    torch.manual_seed(seed)
    parts: dict[str, Any] = {name: module.to(dtype).to("cpu")
                             for name, module in full_size_components(variant, device).items()}
    tokenizer = write_qwen_tokenizer(out / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], 512)
    pipeline: Any = Flux2KleinPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), tokenizer=tokenizer,
                                  is_distilled=False, **parts)
    pipeline.save_pretrained(out, safe_serialization=True)
    return out


def write_full_size(size: str | None, folder: str | Path, dtype: torch.dtype, seed: int = 0,
                    device: str = "cpu") -> Path:
    """A full-size model of one size (the 4B when none is named)."""
    return write_full_size_flux2_klein(size or VARIANTS[0], folder, dtype, seed=seed, device=device)


# The adapter's default targets (diffusers' [klein] example): the double blocks' image attention and
# the single blocks' two fused projections.
LORA_TARGETS = ("to_k", "to_q", "to_v", "to_out.0", "to_qkv_mlp_proj", "attn.to_out")


def _count_inputs(transformer: Any, batch: int, dtype: torch.dtype, resolution: int = 1024,
                  text_tokens: int = 512) -> dict[str, Any]:
    """The transformer's forward arguments at `resolution` (full size: 128 channels, 32 VAE channels patchified
    2x2)."""
    from diffusers import Flux2KleinPipeline

    side = resolution // 16
    latents = torch.empty(batch, transformer.config.in_channels, side, side, device="meta", dtype=dtype)
    embeds = torch.empty(batch, text_tokens, transformer.config.joint_attention_dim, device="meta", dtype=dtype)
    img_ids = Flux2KleinPipeline._prepare_latent_ids(torch.empty(batch, 1, side, side))
    txt_ids = Flux2KleinPipeline._prepare_text_ids(torch.empty(batch, text_tokens, 1))
    return {"hidden_states": Flux2KleinPipeline._pack_latents(latents), "encoder_hidden_states": embeds,
            "timestep": torch.ones(batch, device="meta", dtype=dtype), "img_ids": img_ids.to("meta"),
            "txt_ids": txt_ids.to("meta"), "guidance": None, "return_dict": False}


def _count_components(variant: str | None) -> dict[str, Any]:
    return full_size_components(variant or VARIANTS[0])


def _make_counting() -> Any:
    from studio.train.pipelines.counting import Counting

    return Counting(
        family="flux2-klein", sizes=VARIANTS, components=_count_components, inputs=_count_inputs,
        output=lambda out: out[0], lora_modules=LORA_TARGETS,
        blocks=lambda model: len(model.transformer_blocks) + len(model.single_transformer_blocks),
        text_encoder=lambda encoder, ids, mask: encoder(input_ids=ids, attention_mask=mask,
                                                        output_hidden_states=True, use_cache=False),
        latent_channels=128, vae_channels=32,
    )


COUNTING = _make_counting()
