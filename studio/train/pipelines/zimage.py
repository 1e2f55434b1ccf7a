"""Z-Image pipelines built offline: tiny (tests) and full size (meta device, counts, the GPU check).

The full-size configuration is the published one of Tongyi-MAI/Z-Image-Turbo and Tongyi-MAI/Z-Image
(the base shares the shapes), which are `ZImageTransformer2DModel`'s defaults in diffusers:

- transformer: width 3840 (30 heads x 128, as many KV heads), 30 main layers and 2 noise- and 2
  context-refiner layers, caption features 2560 wide (Qwen3-4B's hidden size), 16 latent channels
  in 2x2 patches, RMS-normed q/k: about 6.15 B parameters.
- text encoder: Qwen3-4B as `Qwen3Model` (hidden 2560, 36 layers, MLP 9728, 32 heads / 8 KV heads of
  128, vocabulary 151936): the same configuration as FLUX.2 [klein] 4B's encoder.
- VAE: FLUX.1's AutoencoderKL, 16 latent channels, blocks 128/256/512/512, scaling 0.3611, shift 0.1159.
- scheduler: flow-matching Euler with a static shift of 3 (no dynamic shifting at training time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from studio.train.pipelines.flux2_klein import QWEN3

TRANSFORMER: dict[str, Any] = {
    "all_patch_size": (2,), "all_f_patch_size": (1,), "in_channels": 16, "dim": 3840, "n_layers": 30,
    "n_refiner_layers": 2, "n_heads": 30, "n_kv_heads": 30, "norm_eps": 1e-5, "qk_norm": True,
    "cap_feat_dim": 2560, "rope_theta": 256.0, "t_scale": 1000.0, "axes_dims": [32, 48, 48],
    "axes_lens": [1536, 512, 512],
}
VAE: dict[str, Any] = {
    "in_channels": 3, "out_channels": 3, "latent_channels": 16, "layers_per_block": 2,
    "block_out_channels": (128, 256, 512, 512), "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4, "norm_num_groups": 32, "sample_size": 1024,
    "scaling_factor": 0.3611, "shift_factor": 0.1159, "use_quant_conv": False, "use_post_quant_conv": False,
    "force_upcast": True,
}
TEXT_ENCODER: dict[str, Any] = {k: v for k, v in QWEN3["4b"].items() if k != "tie_word_embeddings"}
SCHEDULER: dict[str, Any] = {"num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": False}
# diffusers' Z-Image example trains LoRAs of every attention projection (main and refiner layers).
LORA_TARGETS = ("to_k", "to_q", "to_v", "to_out.0")
TINY_TOKENS = 128


def full_size_transformer(device: str | torch.device = "meta") -> Any:
    from diffusers import ZImageTransformer2DModel

    with torch.device(device):
        return ZImageTransformer2DModel(**TRANSFORMER)


def full_size_components(size: str | None = None, device: str | torch.device = "meta") -> dict[str, Any]:
    """The transformer, VAE and Qwen3 text encoder of Z-Image at full size (of one size: `size` is None)."""
    from diffusers import AutoencoderKL
    from transformers import Qwen3Config, Qwen3Model

    transformer = full_size_transformer(device)
    with torch.device(device):
        return {"transformer": transformer, "vae": AutoencoderKL(**VAE),
                "text_encoder": Qwen3Model(Qwen3Config(**TEXT_ENCODER))}


def _fix_pad_tokens(transformer: Any) -> None:
    """The transformer's pad tokens are made with torch.empty: give them values (NaN-free random weights)."""
    with torch.no_grad():
        transformer.x_pad_token.normal_(0.0, 0.02)
        transformer.cap_pad_token.normal_(0.0, 0.02)


def build_tiny(folder: Path, seed: int) -> Path:
    """Z-Image in miniature: a 2-layer narrow Qwen3 encoder, a Z-Image transformer with one refiner layer of
    each kind, a four-block FLUX-style VAE (16x smaller latents in the transformer's 2x2 patches) and the
    Turbo scheduler."""
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        ZImagePipeline,
        ZImageTransformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3Model

    from studio.core.dataset.demo_shapes import CAPTION_WORDS
    from studio.train.pipelines.flux2_klein_tokenizer import write_qwen_tokenizer
    from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS

    tokenizer = write_qwen_tokenizer(folder / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], TINY_TOKENS)
    torch.manual_seed(seed)
    hidden = 16
    text_encoder = Qwen3Model(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=TINY_TOKENS,
        pad_token_id=tokenizer.pad_token_id,
    ))
    latent_channels = 4
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,), all_f_patch_size=(1,), in_channels=latent_channels, dim=32, n_layers=2,
        n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=hidden, axes_dims=[8, 4, 4],
        axes_lens=TRANSFORMER["axes_lens"],  # the published RoPE lengths: it trains at every size the real one does
    )
    _fix_pad_tokens(transformer)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=latent_channels, layers_per_block=1,
        block_out_channels=(8, 16, 32, 32), down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=8, sample_size=64,
        scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False,
    )
    pipeline: Any = ZImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae,
                                   text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer)
    pipeline.save_pretrained(folder, safe_serialization=True)
    return folder


def write_full_size(size: str | None, folder: str | Path, dtype: torch.dtype, seed: int = 0,
                    device: str = "cpu") -> Path:
    """A loadable full-size Z-Image folder with random weights (about 20 GB in bf16) and the tiny tokenizer
    (its ids stay inside the real vocabulary)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline

    from studio.core.dataset.demo_shapes import CAPTION_WORDS
    from studio.train.pipelines.flux2_klein_tokenizer import write_qwen_tokenizer
    from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS

    out = Path(folder)
    torch.manual_seed(seed)
    parts: dict[str, Any] = {name: module.to(dtype).to("cpu") for name, module in full_size_components(None, device).items()}
    _fix_pad_tokens(parts["transformer"])
    tokenizer = write_qwen_tokenizer(out / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], 512)
    pipeline: Any = ZImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), tokenizer=tokenizer,
                                   **parts)
    pipeline.save_pretrained(out, safe_serialization=True)
    return out


def _count_inputs(transformer: Any, batch: int, dtype: torch.dtype, resolution: int = 1024,
                  text_tokens: int = 512) -> dict[str, Any]:
    """The transformer's forward arguments at `resolution`: one (16, 1, H/8, W/8) latent and one caption of
    `text_tokens` rows per image."""
    side = resolution // 8
    channels = transformer.config.in_channels
    width = transformer.config.cap_feat_dim
    return {"x": [torch.empty(channels, 1, side, side, device="meta", dtype=dtype) for _ in range(batch)],
            "t": torch.ones(batch, device="meta", dtype=dtype),
            "cap_feats": [torch.empty(text_tokens, width, device="meta", dtype=dtype) for _ in range(batch)],
            "return_dict": False}


def _make_counting() -> Any:
    from studio.train.pipelines.counting import Counting

    return Counting(
        family="zimage", sizes=(), components=full_size_components, inputs=_count_inputs,
        output=lambda out: torch.stack(list(out[0])), lora_modules=LORA_TARGETS,
        blocks=lambda model: len(model.layers) + len(model.noise_refiner) + len(model.context_refiner),
        text_encoder=lambda encoder, ids, mask: encoder(input_ids=ids, attention_mask=mask,
                                                        output_hidden_states=True, use_cache=False),
        latent_channels=16, vae_channels=16,
    )


COUNTING = _make_counting()
