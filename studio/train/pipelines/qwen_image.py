"""Qwen-Image pipelines built offline: tiny (tests) and full size (meta device, counts, the GPU check).

The full-size configuration is the published one of Qwen/Qwen-Image (and Qwen-Image-2512, which shares
the shapes); the transformer's and the VAE's are their classes' defaults in diffusers:

- transformer: `QwenImageTransformer2DModel`, 60 double-stream (MMDiT) blocks 3072 wide (24 heads x 128),
  caption features 3584 wide (Qwen2.5-VL-7B's hidden size), 16 latent channels in 2x2 patches (64 in):
  about 20.4 B parameters.
- text encoder: Qwen2.5-VL-7B-Instruct as `Qwen2_5_VLForConditionalGeneration` (language model 3584 wide,
  28 layers, MLP 18944, 28 heads / 4 KV heads, vocabulary 152064, its vision tower and LM head too,
  which the pipeline loads though a text prompt never uses them).
- VAE: `AutoencoderKLQwenImage` (Wan-style causal 3-D VAE, 16 latent channels, 8x smaller, normalised by
  per-channel latents_mean / latents_std).
- scheduler: flow-matching Euler with resolution-dependent (dynamic) shifting for sampling; training uses
  its unshifted schedule, as diffusers' Qwen-Image LoRA example does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

TRANSFORMER: dict[str, Any] = {
    "patch_size": 2, "in_channels": 64, "out_channels": 16, "num_layers": 60, "attention_head_dim": 128,
    "num_attention_heads": 24, "joint_attention_dim": 3584, "guidance_embeds": False, "axes_dims_rope": (16, 56, 56),
}
VAE: dict[str, Any] = {
    "base_dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_scales": [],
    "temperal_downsample": [False, True, True], "dropout": 0.0,
}
TEXT_ENCODER: dict[str, Any] = {
    "vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "max_position_embeddings": 128000, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    "hidden_act": "silu", "use_sliding_window": False, "max_window_layers": 28,
}
VISION_ENCODER: dict[str, Any] = {
    "depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 3584,
    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31], "hidden_act": "silu", "tokens_per_second": 2,
}
# Qwen/Qwen-Image's scheduler: shifted by the image's token count when sampling (none at init, so training
# draws from the plain 0..1 sigmas).
SCHEDULER: dict[str, Any] = {
    "num_train_timesteps": 1000, "shift": 1.0, "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 0.9,
    "base_image_seq_len": 256, "max_image_seq_len": 8192, "shift_terminal": 0.02, "time_shift_type": "exponential",
}
# diffusers' Qwen-Image LoRA example trains the image stream's attention projections of every block.
LORA_TARGETS = ("to_k", "to_q", "to_v", "to_out.0")
TINY_TOKENS = 128
# The system prompt QwenImagePipeline wraps every prompt in; the encoder's rows for its first 34 tokens
# (everything before the caption) are dropped (`prompt_template_encode_start_idx`).
TEMPLATE_PREFIX = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
                   "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n")
TEMPLATE_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
TEMPLATE_TOKENS = 34
# QwenImageEditPipeline's template: the control image's vision tokens come before the instruction, and the encoder's
# rows for the first 64 tokens (the system prompt and "<|im_start|>user\n") are dropped; the vision rows stay.
EDIT_TEMPLATE_PREFIX = ("<|im_start|>system\nDescribe the key features of the input image (color, shape, size, "
                        "texture, objects, background), then explain how the user's text instruction should alter or "
                        "modify the image. Generate a new image that meets the user's requirements while maintaining "
                        "consistency with the original input where appropriate.<|im_end|>\n<|im_start|>user\n")
EDIT_TEMPLATE_SUFFIX = "<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n"
EDIT_TEMPLATE_TOKENS = 64
# QwenImageEditPlusPipeline's: the same system prompt, then each control as "Picture N: " and its vision tokens.
EDIT_PLUS_TEMPLATE_SUFFIX = "{}<|im_end|>\n<|im_start|>assistant\n"
EDIT_PLUS_PICTURE = "Picture {}: <|vision_start|><|image_pad|><|vision_end|>"
# The tiny Edit processor's largest image side in pixels, and words of edit instructions its tokenizer keeps whole.
TINY_VISION_SIDE = 56
EDIT_WORDS = ("make", "it", "negative", "turn", "into", "change", "to", "remove", "add")
VISION_TOKENS = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")
PROCESSOR = "processor"  # the Edit pipeline's component (and folder) that shows the encoder the control image
VIDEO_TOKEN = "<|video_pad|>"  # never in a prompt; the processor counts it, so the tokenizer must know it


def full_size_transformer(device: str | torch.device = "meta") -> Any:
    from diffusers import QwenImageTransformer2DModel

    with torch.device(device):
        return QwenImageTransformer2DModel(**TRANSFORMER)


def text_encoder_config(text: dict[str, Any], vision: dict[str, Any]) -> Any:
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(text_config=dict(text), vision_config=dict(vision), tie_word_embeddings=False)


def full_size_components(size: str | None = None, device: str | torch.device = "meta") -> dict[str, Any]:
    """The transformer, VAE and Qwen2.5-VL text encoder of Qwen-Image at full size."""
    from diffusers import AutoencoderKLQwenImage
    from transformers import Qwen2_5_VLForConditionalGeneration

    transformer = full_size_transformer(device)
    with torch.device(device):
        return {"transformer": transformer, "vae": AutoencoderKLQwenImage(**VAE),
                "text_encoder": Qwen2_5_VLForConditionalGeneration(text_encoder_config(TEXT_ENCODER,
                                                                                       VISION_ENCODER))}


def parameter_counts() -> dict[str, int]:
    return {name: sum(p.numel() for p in module.parameters()) for name, module in full_size_components().items()}


def write_tokenizer(folder: Path, words: list[str], max_length: int, edit: bool = False) -> Any:
    """The tiny Qwen tokenizer (byte-level BPE, flux2_klein_tokenizer.py) taught the system prompt's words whole,
    so that the prompt's prefix is as many tokens as with the real tokenizer (34; the Edit template's 64) and the
    pipeline drops exactly it. `edit`: the Edit pipeline's template, and the vision tokens its processor expands
    (`<|vision_start|>`, `<|image_pad|>`, `<|vision_end|>`) as special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    from studio.train.pipelines.flux2_klein_tokenizer import CHAT_TEMPLATE, PAD, SPECIAL

    special = (*SPECIAL, *VISION_TOKENS, VIDEO_TOKEN) if edit else SPECIAL
    prefix, suffix, count = ((EDIT_TEMPLATE_PREFIX, EDIT_TEMPLATE_SUFFIX, EDIT_TEMPLATE_TOKENS) if edit
                             else (TEMPLATE_PREFIX, TEMPLATE_SUFFIX, TEMPLATE_TOKENS))
    words = sorted({w.lower() for w in words if w.strip()})
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    template = prefix + suffix.replace("{}", " ")
    for token in special:
        template = template.replace(token, " ")
    corpus = [" ".join(words), *(f" {w}" for w in words), *([template] * 4), "system", "user", "assistant", "\n\n"]
    trainer = trainers.BpeTrainer(
        vocab_size=256 + len(special) + 4 * len(words) + 4 * len(template.split()), special_tokens=list(special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    vision: dict[str, Any] = ({"extra_special_tokens": {"image_token": "<|image_pad|>", "video_token": VIDEO_TOKEN,
                                                        "vision_start_token": "<|vision_start|>",
                                                        "vision_end_token": "<|vision_end|>"}} if edit else {})
    tokenizer = Qwen2Tokenizer(tokenizer_object=core, pad_token=PAD, eos_token="<|im_end|>",
                               model_max_length=max_length, chat_template=CHAT_TEMPLATE, **vision)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    loaded = Qwen2Tokenizer.from_pretrained(folder)
    tokens = len(loaded(prefix).input_ids)
    if tokens != count:  # the pipeline would drop part of the caption, or keep part of the system prompt
        raise RuntimeError(f"the tiny Qwen tokenizer splits the system prompt into {tokens} tokens, not {count}")
    return loaded


def tiny_text_encoder(tokenizer: Any, hidden: int, seed: int) -> Any:
    """A two-layer Qwen2.5-VL `hidden` wide with a one-block vision tower 16 wide (text prompts never use it; the
    Edit pipeline's prompts give it the control image), its image and vision tokens the tokenizer's ids."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    text = {"vocab_size": len(tokenizer), "hidden_size": hidden, "intermediate_size": 2 * hidden, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": TINY_TOKENS + 64,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                "mrope_section": [2, 3, 3]},  # half of the 16-wide heads
            "pad_token_id": tokenizer.pad_token_id, "bos_token_id": None, "eos_token_id": tokenizer.eos_token_id}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": hidden,
              "fullatt_block_indexes": [0]}
    config = text_encoder_config(text, vision)
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in
           zip(("vision_start_token_id", "image_token_id", "vision_end_token_id", "video_token_id"),
               (*VISION_TOKENS, VIDEO_TOKEN), strict=True)}
    for name, value in ids.items():
        if isinstance(value, int) and value != tokenizer.unk_token_id:  # the Edit tokenizer knows them
            setattr(config, name, value)
    torch.manual_seed(seed)
    return Qwen2_5_VLForConditionalGeneration(config)


def edit_processor(image_processor: Any, tokenizer: Any) -> Any:
    """The Edit pipeline's Qwen2VLProcessor without a video processor: transformers' video processors need
    torchvision, which the training environment does not hold, and the pipeline never gives the encoder a video.
    Its image processor is the PIL one (`Qwen2VLImageProcessorPil`, the same resizing and patches)."""
    from transformers import Qwen2VLProcessor

    class EditProcessor(Qwen2VLProcessor):
        """Qwen2VLProcessor that takes no video processor (transformers checks every part's class, None too)."""

        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument is None and argument_name == "video_processor":
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

        def save_pretrained(self, save_directory: Any, push_to_hub: bool = False, **kwargs: Any) -> Any:
            """The image processor's and the tokenizer's files, as the hub's processor/ folder holds them."""
            self.image_processor.save_pretrained(save_directory)
            return self.tokenizer.save_pretrained(save_directory)

    return EditProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
                         chat_template=getattr(tokenizer, "chat_template", None))


def load_edit_processor(base: str, **options: Any) -> Any:
    """The processor of a Qwen-Image-Edit folder or hub id (its processor/ folder), built without torchvision."""
    from transformers import Qwen2Tokenizer, Qwen2VLImageProcessorPil

    images = Qwen2VLImageProcessorPil.from_pretrained(base, subfolder=PROCESSOR, **options)
    tokenizer = Qwen2Tokenizer.from_pretrained(base, subfolder=PROCESSOR, **options)
    return edit_processor(images, tokenizer)


def tiny_processor(tokenizer: Any) -> Any:
    """The tiny Edit processor: images resized to at most 56 x 56 pixels (a 4 x 4 grid of 14-pixel patches, 4 vision
    tokens after the 2 x 2 merge)."""
    from transformers import Qwen2VLImageProcessorPil

    side = TINY_VISION_SIDE
    images = Qwen2VLImageProcessorPil(size={"shortest_edge": side * side // 4, "longest_edge": side * side})
    return edit_processor(images, tokenizer)


def build_tiny(folder: Path, seed: int, edit: bool | str = False) -> Path:
    """Qwen-Image in miniature: a 2-layer narrow Qwen2.5-VL encoder, a 2-block MMDiT, a small causal 3-D VAE
    (8x smaller latents of 4 channels, packed 2x2 for the transformer) and Qwen-Image's scheduler. `edit` (True or
    "edit"): the Qwen-Image-Edit pipeline instead (`QwenImageEditPipeline`), the same parts with the Edit template's
    tokenizer and the processor that shows the encoder the control image; "plus": Edit Plus
    (`QwenImageEditPlusPipeline`, its transformer's control tokens at timestep 0 as Qwen-Image-Edit-2511's)."""
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageEditPipeline,
        QwenImageEditPlusPipeline,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )

    if edit not in (False, True, "edit", "plus"):
        raise ValueError(f"edit={edit!r}: the tiny Qwen-Image edit models are \"edit\" and \"plus\"")
    plus = edit == "plus"
    edit = bool(edit)

    from studio.core.dataset.demo_shapes import CAPTION_WORDS
    from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS

    words = [*CAPTION_WORDS, *EXTRA_WORDS, *(EDIT_WORDS if edit else ())]
    tokenizer = write_tokenizer(folder / "tokenizer", words, TINY_TOKENS, edit=edit)
    hidden, latent_channels = 32, 4
    text_encoder = tiny_text_encoder(tokenizer, hidden, seed)
    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(
        patch_size=2, in_channels=4 * latent_channels, out_channels=latent_channels, num_layers=2,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=hidden, axes_dims_rope=(4, 6, 6),
        **({"zero_cond_t": True} if plus else {}),
    )
    vae = AutoencoderKLQwenImage(
        base_dim=8, z_dim=latent_channels, dim_mult=[1, 2, 4, 4], num_res_blocks=1, attn_scales=[],
        temperal_downsample=[False, True, True], latents_mean=[-0.7571, -0.7089, -0.9113, 0.1075],
        latents_std=[2.8184, 1.4541, 2.3275, 2.6558],
    )
    parts: dict[str, Any] = {"scheduler": FlowMatchEulerDiscreteScheduler(**SCHEDULER), "vae": vae,
                             "text_encoder": text_encoder, "tokenizer": tokenizer, "transformer": transformer}
    edit_class = QwenImageEditPlusPipeline if plus else QwenImageEditPipeline
    pipeline: Any = edit_class(processor=tiny_processor(tokenizer), **parts) if edit else QwenImagePipeline(**parts)
    pipeline.save_pretrained(folder, safe_serialization=True)
    if edit:  # the processor's entry names transformers' class, as the hub's Qwen-Image-Edit folder does
        index = folder / "model_index.json"
        entries = json.loads(index.read_text(encoding="utf-8"))
        entries[PROCESSOR] = ["transformers", "Qwen2VLProcessor"]
        index.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    return folder


def write_full_size(size: str | None, folder: str | Path, dtype: torch.dtype, seed: int = 0,
                    device: str = "cpu") -> Path:
    """A loadable full-size Qwen-Image folder with random weights (about 58 GB in bf16) and the tiny tokenizer
    (its ids stay inside the real vocabulary)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, QwenImagePipeline

    from studio.core.dataset.demo_shapes import CAPTION_WORDS
    from studio.train.pipelines.tiny_tokenizer import EXTRA_WORDS

    out = Path(folder)
    torch.manual_seed(seed)
    parts: dict[str, Any] = {name: module.to(dtype).to("cpu") for name, module in full_size_components(None, device).items()}
    tokenizer = write_tokenizer(out / "tokenizer", [*CAPTION_WORDS, *EXTRA_WORDS], 1024)
    pipeline: Any = QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), tokenizer=tokenizer,
                                      **parts)
    pipeline.save_pretrained(out, safe_serialization=True)
    return out


def full_size_main(args: Any) -> int:
    """`studio-train tiny qwen-image --full-size [--write DIR]`: counts, and the folder when asked."""
    from studio.core.exit_codes import EXIT_INVALID, EXIT_OK

    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    counts = parameter_counts()
    for name, count in counts.items():
        print(f"{name:16} {count / 1e6:10,.1f} M parameters")
    total = sum(counts.values())
    bytes_per = 4 if args.dtype == "fp32" else 2
    print(f"{'total':16} {total / 1e6:10,.1f} M parameters, {total * bytes_per / 2**30:.1f} GiB in {args.dtype} "
          "(Qwen-Image)")
    if not args.write:
        print("nothing written; add --write and a folder to write these random weights")
        return EXIT_OK
    if not args.dir:
        print("--write needs the folder to write into: studio-train tiny qwen-image DIR --full-size --write",
              file=sys.stderr)
        return EXIT_INVALID
    folder = write_full_size(None, args.dir, dtypes[args.dtype], seed=args.seed)
    print(f"full-size Qwen-Image pipeline (random weights) written to {folder}")
    return EXIT_OK


def _count_inputs(transformer: Any, batch: int, dtype: torch.dtype, resolution: int = 1024,
                  text_tokens: int = 512) -> dict[str, Any]:
    """The transformer's forward arguments at `resolution`: (resolution/16)^2 packed latent tokens of 64
    channels and `text_tokens` caption rows per image."""
    side = resolution // 16
    width = transformer.config.joint_attention_dim
    return {"hidden_states": torch.empty(batch, side * side, transformer.config.in_channels, device="meta",
                                         dtype=dtype),
            "encoder_hidden_states": torch.empty(batch, text_tokens, width, device="meta", dtype=dtype),
            "timestep": torch.ones(batch, device="meta", dtype=dtype),
            "img_shapes": [[(1, side, side)]] * batch, "return_dict": False}


def _counted_components(size: str | None) -> dict[str, Any]:
    """The full-size components as the counter calls them: its VAE takes one image (B, C, H, W), not a video."""
    from diffusers import AutoencoderKLQwenImage as VideoVAE

    class AutoencoderKLQwenImage(VideoVAE):
        """The Qwen-Image VAE on one frame: the frame axis added on the way in, taken off on the way out."""

        def encode(self, x: torch.Tensor, return_dict: bool = True) -> Any:
            video: Any = super()
            return video.encode(x.unsqueeze(2), return_dict=return_dict)

        def decode(self, z: torch.Tensor, return_dict: bool = True) -> Any:
            video: Any = super()
            out = video.decode(z.unsqueeze(2), return_dict=return_dict)
            if return_dict:
                out.sample = out.sample[:, :, 0]
            return out

    parts = full_size_components()
    with torch.device("meta"):
        parts["vae"] = AutoencoderKLQwenImage(**VAE)
    return parts


def _make_counting() -> Any:
    from studio.train.pipelines.counting import Counting

    return Counting(
        family="qwen-image", sizes=(), components=_counted_components, inputs=_count_inputs,
        output=lambda out: out[0], lora_modules=LORA_TARGETS, blocks=lambda model: len(model.transformer_blocks),
        text_encoder=lambda encoder, ids, mask: encoder(input_ids=ids, attention_mask=mask,
                                                        output_hidden_states=True, use_cache=False),
        latent_channels=64, vae_channels=16,
    )


COUNTING = _make_counting()
