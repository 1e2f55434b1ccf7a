"""Qwen-Image: the double-stream MMDiT trained by flow matching, as diffusers' Qwen-Image LoRA example does.

- Text: the Qwen2.5-VL encoder's last hidden states of the prompt in the pipeline's system-prompt template,
  without the template's first 34 rows (what `QwenImagePipeline.encode_prompt` gives), padded to a fixed
  length with a mask (the cache stacks them) that keeps the padding out of the transformer's attention.
- Images: the causal 3-D VAE's latents of one frame, normalised by its per-channel latents_mean / latents_std;
  kept as (C, H, W) so the loop, the caches and the loss masks see a plain latent image.
- Noise: rectified flow on the scheduler's unshifted training schedule with the configured timestep density
  and loss weighting; the transformer takes the latents packed into 2x2 patches with their (1, H/2, W/2)
  shape, the timestep / 1000, and predicts the velocity noise - x_0 that the loss compares.
- Samples: the pipeline's true classifier-free guidance (`true_cfg_scale`, with the negative prompt, an empty
  one when none is set); its latents come out packed and are unpacked before the decode.
- Edit pairs, on Qwen-Image-Edit (a base whose pipeline is `QwenImageEditPipeline`, loaded with its processor built
  without torchvision) and Edit Plus (`QwenImageEditPlusPipeline`, 2509 / 2511): each caption is embedded in the
  edit template with its pair's controls, resized as the pipeline resizes them for its encoder (1024 x 1024
  pixels; Edit Plus: 384 x 384, each as "Picture N:") and read by the encoder's vision tower, exactly as the
  pipeline's `encode_prompt` (the template's first 64 rows dropped, the controls' vision rows kept), so the
  caption cache keys it by the caption and the pair; the controls' latents (the distribution's mode, as the
  pipeline encodes them) are packed after the target's tokens with every shape in `img_shapes`, as the pipeline
  calls the transformer (which puts Edit-2511's control tokens at timestep 0 itself), and the loss reads the
  target's tokens only. Samples edit the controls through the pipeline's `image=`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from studio.core.families import qwen_image as declared
from studio.train.components import Components
from studio.train.errors import TrainError
from studio.train.families.base import REFERENCES, Conditioning, FamilyAdapter, Picture, draw_latents
from studio.train.families.loading import folder_dtypes, hub_options, load_or_fail, model_source
from studio.train.families.schemes import FlowMatchingScheme, NoiseScheme
from studio.train.memory.precision import input_dtype
from studio.train.memory.transfer import to_device
from studio.train.pipelines.qwen_image import (
    EDIT_PLUS_PICTURE,
    EDIT_PLUS_TEMPLATE_SUFFIX,
    EDIT_TEMPLATE_PREFIX,
    EDIT_TEMPLATE_SUFFIX,
    EDIT_TEMPLATE_TOKENS,
    LORA_TARGETS,
    PROCESSOR,
    TEMPLATE_PREFIX,
    TEMPLATE_SUFFIX,
    TEMPLATE_TOKENS,
)

NEEDS = {"text_encoder": "the Qwen2.5-VL text encoder", "tokenizer": "the Qwen tokenizer",
         "transformer": "the Qwen-Image transformer", "vae": "the Qwen-Image VAE"}
# The prompt length its declaration gives (the pipeline's default); a smaller tokenizer limit (the tiny model's) wins.
MAX_TOKENS = declared.FAMILY.caption_token_limit
EDIT_AREA = 1024 * 1024  # the pixels QwenImageEditPipeline resizes a control image to, at its aspect ratio
EDIT_PLUS_AREA = 384 * 384  # the pixels QwenImageEditPlusPipeline shows its encoder a control image at


class QwenImageAdapter(FamilyAdapter):
    family: ClassVar[str] = "qwen-image"
    text_encoder_names: ClassVar[tuple[str, ...]] = ("text_encoder",)
    rename_lora_keys: ClassVar[bool] = False
    kohya_base_version: ClassVar[str] = "qwen_image"
    kohya_architecture: ClassVar[str] = "qwen-image"
    # A LoHa/LoKr file's modules under the `lora_unet_` names of the LoRA file (qwen_image_names.py), which
    # ComfyUI maps for every model and musubi-tuner writes.
    kohya_renames: ClassVar[dict[str, str]] = {"lora_transformer_": "lora_unet_"}
    prompt_embedding_names: ClassVar[tuple[str, ...]] = (
        "prompt_embeds", "prompt_embeds_mask", "negative_prompt_embeds", "negative_prompt_embeds_mask")

    max_tokens = MAX_TOKENS
    edit = False  # the base is an edit model: Qwen-Image-Edit or Edit Plus (set by `load`)
    edit_plus = False  # the base is Edit Plus (QwenImageEditPlusPipeline)

    # ------------------------------------------------------------ loading

    def load(self, device: torch.device, weight_dtype: torch.dtype) -> Components:
        import diffusers
        from diffusers import QwenImagePipeline

        from studio.core.dataset.edit_pairs.training import edit_training_refusal
        from studio.train.pipelines.qwen_image import load_edit_processor

        model = self.config.model
        if self.config.method.train_text_encoder:
            raise TrainError("config", "method.train_text_encoder = true: Qwen-Image trains its transformer only "
                             "(the Qwen2.5-VL encoder's embeddings are cached)", "set method.train_text_encoder = false")
        base = model.base
        source = model_source(base, self.family, NEEDS)
        if source == "file":
            raise TrainError("model", f"{base} is a single file; Qwen-Image trains from a diffusers folder or hub id "
                             "(transformer, VAE and Qwen2.5-VL encoder together)",
                             "point model.base at a diffusers folder, e.g. Qwen/Qwen-Image", path=base)
        refusal = edit_training_refusal(self.config)  # edit pairs on Qwen-Image-Edit only, and it on edit pairs only
        if refusal is not None:
            raise TrainError("config", refusal[0], refusal[1], path=base)
        edit_pipeline = declared.edit_pipeline(base)
        self.edit = self.prompt_sees_controls = edit_pipeline is not None
        self.edit_plus = edit_pipeline == declared.EDIT_PLUS_PIPELINE
        dtypes = self.load_dtypes(weight_dtype)
        options: dict[str, Any] = {"revision": model.revision, "variant": model.variant, **folder_dtypes(dtypes),
                                   **hub_options(base, model.revision, model.variant)}
        extras: dict[str, Any] = {}
        if edit_pipeline is not None:
            extras[PROCESSOR] = load_or_fail(
                "processor (processor/ folder)", base, lambda: load_edit_processor(
                base, revision=model.revision, **hub_options(base, model.revision)),
                "an edit model's folder holds its processor/ folder (the image processor's and the tokenizer's "
                "files) as the hub's Qwen-Image-Edit releases do: download it again, or copy processor/ from the "
                "hub's repository")
            pipe = load_or_fail("pipeline", base, lambda: getattr(diffusers, edit_pipeline).from_pretrained(
                base, processor=extras[PROCESSOR], **options))
        else:
            pipe = load_or_fail("pipeline", base, lambda: QwenImagePipeline.from_pretrained(base, **options))
        transformer, vae, encoder = pipe.transformer, pipe.vae, pipe.text_encoder
        self.max_tokens = min(MAX_TOKENS, int(getattr(pipe.tokenizer, "model_max_length", MAX_TOKENS)))
        self.place_frozen(transformer, vae, [encoder], device, weight_dtype, dtypes)
        return Components(transformer, vae, [encoder], [pipe.tokenizer], pipe.scheduler, pipe.scheduler,
                          extras=extras)

    def default_lora_targets(self) -> list[str]:
        return list(LORA_TARGETS)

    def trainable_encoders(self, components: Components) -> list[torch.nn.Module]:
        return []

    # ------------------------------------------------------------ encoding

    def encode_prompts(self, components: Components, captions: list[str]) -> Conditioning:
        """The pipeline's prompt embedding (the template's rows dropped), padded to `max_tokens` rows, and the
        mask of the real rows."""
        encoder, tokenizer = components.text_encoders[0], components.tokenizers[0]
        texts = [f"{TEMPLATE_PREFIX}{caption}{TEMPLATE_SUFFIX}" for caption in captions]
        tokens = tokenizer(texts, padding="max_length", max_length=self.max_tokens + TEMPLATE_TOKENS,
                           truncation=True, return_tensors="pt")
        device = next(encoder.parameters()).device
        mask = to_device(tokens.attention_mask, device)
        hidden = encoder(input_ids=to_device(tokens.input_ids, device), attention_mask=mask,
                         output_hidden_states=True).hidden_states[-1]
        rows = [hidden[i][mask[i].bool()][TEMPLATE_TOKENS:] for i in range(hidden.shape[0])]
        embeds = hidden.new_zeros(hidden.shape[0], self.max_tokens, hidden.shape[-1])
        kept = torch.zeros(hidden.shape[0], self.max_tokens, device=device, dtype=hidden.dtype)
        for i, row in enumerate(rows):
            embeds[i, : row.shape[0]] = row
            kept[i, : row.shape[0]] = 1.0
        return {"prompt_embeds": embeds, "prompt_mask": kept}

    def encode_edit_prompts(self, components: Components, captions: list[str],
                            controls: torch.Tensor) -> Conditioning:
        """Each caption in the edit model's template with its pair's controls, as the pipeline's `encode_prompt`
        embeds it (`edit_prompt_inputs`; the template's first 64 rows dropped), padded to the rows that are not the
        caption's plus `max_tokens`, with the mask of the real rows."""
        if not self.edit:
            return self.encode_prompts(components, captions)
        if not self.edit_plus and controls.shape[1] != 1:
            raise TrainError("data", f"Qwen-Image-Edit edits one control image, but these pairs have {controls.shape[1]}",
                             "give each target one control image (one control folder)")
        pictures = [[_pil(pixels) for pixels in pair] for pair in controls]
        texts, images = edit_prompt_inputs(captions, pictures, self.edit_plus)
        encoder, processor = components.text_encoders[0], components.extras[PROCESSOR]
        device = next(encoder.parameters()).device
        inputs = processor(text=texts, images=images, padding=True, return_tensors="pt").to(device)
        mask = inputs["attention_mask"]
        hidden = encoder(input_ids=inputs["input_ids"], attention_mask=mask, pixel_values=inputs.get("pixel_values"),
                         image_grid_thw=inputs.get("image_grid_thw"), output_hidden_states=True).hidden_states[-1]
        rows = [hidden[i][mask[i].bool()][EDIT_TEMPLATE_TOKENS:] for i in range(hidden.shape[0])]
        # The pairs of a batch share their bucket and control count: the rows that are not the caption's (the
        # controls' vision rows, the pictures' names, the template's end) are as many, and the padded rows stack.
        words = processor.tokenizer(captions[0], add_special_tokens=False).input_ids
        length = rows[0].shape[0] - len(words) + self.max_tokens
        embeds = hidden.new_zeros(hidden.shape[0], length, hidden.shape[-1])
        kept = torch.zeros(hidden.shape[0], length, device=device, dtype=hidden.dtype)
        for i, row in enumerate(rows):
            row = row[:length]
            embeds[i, : row.shape[0]] = row
            kept[i, : row.shape[0]] = 1.0
        return {"prompt_embeds": embeds, "prompt_mask": kept}

    def encode_images(
        self, components: Components, pixels: torch.Tensor, draws: list[torch.Generator] | None = None
    ) -> torch.Tensor:
        """One frame's latents (a sample with `draws`, else the mean), normalised by the VAE's per-channel
        statistics: (x - latents_mean) / latents_std, as (B, C, H, W)."""
        vae: Any = components.vae
        frames = pixels.to(vae.device, vae.dtype).unsqueeze(2)
        latents = draw_latents(vae.encode(frames).latent_dist, draws).squeeze(2)
        mean, std = _statistics(vae, latents)
        return (latents - mean) / std

    def noise_scheme(self, components: Components) -> NoiseScheme:
        return FlowMatchingScheme(components.scheduler, self.config.training)

    def predict(
        self, denoiser: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, cond: Conditioning
    ) -> torch.Tensor:
        # The padded rows stay (masked out of the attention): cutting them to the batch's longest caption would
        # read the lengths back from the GPU every step.
        dtype = input_dtype(denoiser, noisy.device)
        embeds, mask = cond["prompt_embeds"].to(dtype), cond["prompt_mask"] > 0.5
        batch, channels, height, width = noisy.shape
        tokens = packed = pack(noisy.to(dtype))
        shapes = [(1, height // 2, width // 2)]
        if REFERENCES in cond:  # edit pairs: the control's tokens after the target's, as QwenImageEditPipeline
            references = cond[REFERENCES].to(dtype)
            tokens = torch.cat([packed, *(pack(references[:, i]) for i in range(references.shape[1]))], dim=1)
            shapes += [(1, r.shape[-2] // 2, r.shape[-1] // 2) for r in references[0]]
        out = denoiser(hidden_states=tokens, encoder_hidden_states=embeds, encoder_hidden_states_mask=mask,
                       timestep=timesteps.to(dtype) / 1000, img_shapes=[shapes] * batch, return_dict=False)[0]
        return unpack(out[:, : packed.shape[1]], channels, height, width)  # the loss reads the target's tokens

    # ------------------------------------------------------------ sampling

    def make_pipeline(self, components: Components) -> Any:
        from diffusers import QwenImageEditPipeline, QwenImageEditPlusPipeline, QwenImagePipeline

        parts: dict[str, Any] = {"scheduler": components.sample_scheduler, "vae": components.vae,
                                 "text_encoder": components.text_encoders[0], "tokenizer": components.tokenizers[0],
                                 "transformer": components.denoiser}
        if self.edit:
            edit = QwenImageEditPlusPipeline if self.edit_plus else QwenImageEditPipeline
            return edit(processor=components.extras[PROCESSOR], **parts)
        return QwenImagePipeline(**parts)

    def sample_conditioning(self, pipeline: Any, prompt: str, negative: str) -> Conditioning:
        """The prompt's embedding and mask, and the negative prompt's (a space when none is set: the pipeline
        guides only with a negative prompt)."""
        device = next(pipeline.text_encoder.parameters()).device
        embeds = [pipeline.encode_prompt(prompt=text, device=device, max_sequence_length=self.max_tokens)
                  for text in (prompt, negative or " ")]
        return dict(zip(self.prompt_embedding_names, (*embeds[0], *embeds[1]), strict=True))

    def sample_edit_conditioning(self, pipeline: Any, prompt: str, negative: str,
                                 references: Sequence[Any]) -> Conditioning:
        """Qwen-Image-Edit: the prompt's and the negative prompt's embeddings with the control image, as the
        pipeline's call makes them from its `image` (resized to its 1024 x 1024 pixel area first)."""
        if not (self.edit and references):
            return self.sample_conditioning(pipeline, prompt, negative)
        device = next(pipeline.text_encoder.parameters()).device
        images = [edit_prompt_image(image, self.edit_plus) for image in references]
        image = images if self.edit_plus else images[0]
        embeds = [pipeline.encode_prompt(prompt=text, image=image, device=device)
                  for text in (prompt, negative or " ")]
        return dict(zip(self.prompt_embedding_names, (*embeds[0], *embeds[1]), strict=True))

    def denoise(self, pipeline: Any, conditioning: Conditioning, generator: torch.Generator, picture: Picture,
                references: Sequence[Any] = ()) -> Any:
        """The pipeline's denoising with true CFG at the sample's guidance, on the transformer's device (the encoder
        may be offloaded), unpacked to (B, C, H, W) latents; Qwen-Image-Edit edits the control (`image=`)."""
        device = next(pipeline.transformer.parameters()).device
        moved = {key: value.to(device) if value is not None else None for key, value in conditioning.items()}
        edit: dict[str, Any] = {}
        if self.edit and references:
            edit["image"] = list(references) if self.edit_plus else references[0]
        packed = pipeline(num_inference_steps=picture.steps, true_cfg_scale=picture.guidance, height=picture.height,
                          width=picture.width, generator=generator, output_type="latent", **moved, **edit).images
        height, width = (2 * (side // (pipeline.vae_scale_factor * 2)) for side in (picture.height, picture.width))
        return unpack(packed, pipeline.transformer.config.out_channels, height, width)

    def decode(self, vae: Any, latents: torch.Tensor) -> torch.Tensor:
        """Normalised (B, C, H, W) latents -> pixels in [-1, 1] (the VAE decodes one frame)."""
        latents = latents.to(vae.device, vae.dtype)
        mean, std = _statistics(vae, latents)
        image: torch.Tensor = vae.decode((latents * std + mean).unsqueeze(2), return_dict=False)[0][:, :, 0]
        return image

    # ------------------------------------------------------------ outputs

    def kohya_layout(self, layers: dict[str, dict[str, torch.Tensor]],
                     adapter_configs: dict[str, dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The ComfyUI / musubi-tuner file (`lora_unet_<module>.lora_down/lora_up/alpha`); a LoHa or LoKr is one
        LyCORIS file under the same module names (`kohya_renames`)."""
        from studio.train.families.qwen_image_names import comfy_state_dict

        config = adapter_configs.get(self.denoiser_name, {})
        alpha = float(config.get("lora_alpha", self.config.method.lora_alpha))
        return comfy_state_dict(layers[self.denoiser_name], alpha, config.get("dora_scales"))


def pack(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H/2 * W/2, 4C): one token per 2x2 patch, as `QwenImagePipeline._pack_latents`."""
    from diffusers import QwenImagePipeline

    batch, channels, height, width = latents.shape
    packed: torch.Tensor = QwenImagePipeline._pack_latents(latents, batch, channels, height, width)
    return packed


def unpack(tokens: torch.Tensor, channels: int, height: int, width: int) -> torch.Tensor:
    """The inverse of `pack`: (B, H/2 * W/2, 4C) -> (B, C, H, W)."""
    batch = tokens.shape[0]
    grid = tokens.view(batch, height // 2, width // 2, channels, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return grid.reshape(batch, channels, height, width)


def edit_prompt_image(image: Any, plus: bool = False) -> Any:
    """A control image as the edit pipeline gives it to its processor: resized at its aspect ratio to 1024 x 1024
    pixels (QwenImageEditPipeline) or 384 x 384 (Edit Plus's condition size), sides multiples of 32
    (`calculate_dimensions`, then its image processor's `resize`)."""
    from diffusers.image_processor import VaeImageProcessor

    width, height = _dimensions(EDIT_PLUS_AREA if plus else EDIT_AREA, image.size[0] / image.size[1])
    return VaeImageProcessor(vae_scale_factor=16).resize(image, height, width)


def edit_prompt_inputs(captions: list[str], controls: list[list[Any]], plus: bool) -> tuple[list[str], list[Any]]:
    """The processor's texts and images for captions with their pairs' controls (PIL): the Edit template with the
    one control's vision tokens before the caption, or Edit Plus's with "Picture N: " and its vision tokens for
    each control; the images as `edit_prompt_image` resizes them, in the texts' order."""
    if plus:
        texts = [EDIT_TEMPLATE_PREFIX + EDIT_PLUS_TEMPLATE_SUFFIX.format(
            "".join(EDIT_PLUS_PICTURE.format(n + 1) for n in range(len(pair))) + caption)
            for caption, pair in zip(captions, controls, strict=True)]
    else:
        texts = [EDIT_TEMPLATE_PREFIX + EDIT_TEMPLATE_SUFFIX.format(caption) for caption in captions]
    return texts, [edit_prompt_image(image, plus) for pair in controls for image in pair]


def _dimensions(area: int, ratio: float) -> tuple[int, int]:
    """(width, height) of `area` pixels at `ratio`, rounded to multiples of 32: the edit pipelines'
    `calculate_dimensions`."""
    width = math.sqrt(area * ratio)
    return round(width / 32) * 32, round(width / ratio / 32) * 32


def _pil(pixels: torch.Tensor) -> Any:
    """(3, H, W) pixels in [-1, 1] -> the PIL image they were read from (the studio scales 8-bit values)."""
    from PIL import Image

    array = ((pixels.detach().float().cpu() + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8)
    return Image.fromarray(array.permute(1, 2, 0).numpy())


def _statistics(vae: Any, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The VAE's per-channel latent mean and standard deviation, shaped to broadcast over (B, C, H, W)."""
    shape = (1, -1, 1, 1)
    mean = torch.tensor(vae.config.latents_mean).view(shape).to(like.device, like.dtype)
    std = torch.tensor(vae.config.latents_std).view(shape).to(like.device, like.dtype)
    return mean, std


ADAPTER = QwenImageAdapter
