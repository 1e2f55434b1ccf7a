"""Z-Image (base and Turbo): the single-stream transformer trained by flow matching, as diffusers' Z-Image example does.

- Text: the Qwen3 encoder's second-to-last hidden states of the chat-templated prompt (what
  `ZImagePipeline` samples with), padded to a fixed length with a mask (the cache stacks them); the
  transformer sees each caption's unpadded rows.
- Images: FLUX.1 VAE latents, shifted and scaled by the VAE's factors.
- Noise: rectified flow on the scheduler's shifted training schedule (`training.shift` replaces the
  shift) with the configured timestep density and loss weighting; the transformer takes one
  (C, 1, H, W) latent per image, the timestep as (1000 - t) / 1000, and predicts x_0 - noise, so its
  output is negated into the velocity noise - x_0 that the loss compares.
- Turbo: `model.training_adapter` names a LoRA file merged into the transformer before training
  (diffusers' `load_lora_weights`, `fuse_lora`, `unload_lora_weights`); it is part of the frozen base
  from then on, so the outputs hold the trained LoRA alone. Samples during training are drawn with it
  merged.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch

from studio.core.config.prompt_options import sample_draws
from studio.core.dataset.buckets import bucket_sizes
from studio.core.families import zimage as declared
from studio.train.components import Components
from studio.train.errors import TrainError
from studio.train.families.base import Conditioning, FamilyAdapter, Picture
from studio.train.families.loading import folder_dtypes, hub_options, load_or_fail, model_source
from studio.train.families.schemes import FlowMatchingScheme, NoiseScheme
from studio.train.memory.precision import input_dtype
from studio.train.memory.transfer import to_device
from studio.train.pipelines.zimage import LORA_TARGETS

NEEDS = {"text_encoder": "the Qwen3 text encoder", "tokenizer": "the Qwen tokenizer",
         "transformer": "the Z-Image transformer", "vae": "the FLUX VAE"}
# The prompt length its declaration gives (the pipeline's default); a smaller tokenizer limit (the tiny model's) wins.
MAX_TOKENS = declared.FAMILY.caption_token_limit
ADAPTER_NAME = "training_adapter"


class ZImageAdapter(FamilyAdapter):
    family: ClassVar[str] = "zimage"
    text_encoder_names: ClassVar[tuple[str, ...]] = ("text_encoder",)
    rename_lora_keys: ClassVar[bool] = False
    kohya_base_version: ClassVar[str] = "zimage"
    kohya_architecture: ClassVar[str] = "z-image"
    # A LoHa/LoKr file's modules: ComfyUI's Z-Image (Lumina2) map reads `lycoris_<diffusers name>`, not the
    # `lora_transformer_` OneTrainer names it knows for SD3 and Flux.
    kohya_renames: ClassVar[dict[str, str]] = {"lora_transformer_": "lycoris_"}
    prompt_embedding_names: ClassVar[tuple[str, ...]] = ("prompt_embeds", "negative_prompt_embeds")

    max_tokens = MAX_TOKENS

    # ------------------------------------------------------------ loading

    def load(self, device: torch.device, weight_dtype: torch.dtype) -> Components:
        from diffusers import ZImagePipeline

        model = self.config.model
        if self.config.method.train_text_encoder:
            raise TrainError("config", "method.train_text_encoder = true: Z-Image trains its transformer only "
                             "(the Qwen3 encoder's embeddings are cached)", "set method.train_text_encoder = false")
        base = model.base
        source = model_source(base, self.family, NEEDS)
        if source == "file":
            raise TrainError("model", f"{base} is a single file; Z-Image trains from a diffusers folder or hub id "
                             "(transformer, VAE and Qwen3 encoder together)",
                             "point model.base at a diffusers folder, e.g. Tongyi-MAI/Z-Image", path=base)
        dtypes = self.load_dtypes(weight_dtype)
        options: dict[str, Any] = {"revision": model.revision, "variant": model.variant, **folder_dtypes(dtypes),
                                   **hub_options(base, model.revision, model.variant)}
        pipe = load_or_fail("pipeline", base, lambda: ZImagePipeline.from_pretrained(base, **options))
        if model.training_adapter:
            merge_training_adapter(pipe, model.training_adapter)
        transformer, vae, encoder = pipe.transformer, pipe.vae, pipe.text_encoder
        self._refuse_beyond_positions(transformer, int(pipe.vae_scale_factor))
        self.max_tokens = min(MAX_TOKENS, int(getattr(pipe.tokenizer, "model_max_length", MAX_TOKENS)))
        self.place_frozen(transformer, vae, [encoder], device, weight_dtype, dtypes)
        return Components(transformer, vae, [encoder], [pipe.tokenizer], pipe.scheduler, pipe.scheduler)

    def _refuse_beyond_positions(self, transformer: Any, vae_scale: int) -> None:
        """The transformer's position table holds so many patches a side; a larger image would fail in its
        first step, so the run is refused at load with the largest size the model takes."""
        config, dataset = transformer.config, self.config.dataset
        limit = int(min(config.axes_lens[1:])) * int(config.all_patch_size[0]) * vae_scale
        sides = [dataset.resolution, self.config.sampling.size or 0]
        draws = sample_draws(self.config.sampling, dataset.resolution, declared.FAMILY.pixel_multiple)
        sides += [max(draw.width, draw.height) for draw in draws]
        if dataset.buckets:
            sides += [max(size) for size in bucket_sizes(dataset.resolution, dataset.bucket_step, dataset.min_bucket,
                                                          dataset.max_bucket)]
        if max(sides) > limit:
            raise TrainError("config", f"{self.config.model.base} takes images up to {limit} px a side (its "
                             f"transformer's position table), and this run makes {max(sides)} px ones",
                             f"set dataset.resolution (and sampling.size, dataset.max_bucket, the sample prompts' "
                             f"--w and --h) to {limit} or less")

    def default_lora_targets(self) -> list[str]:
        return list(LORA_TARGETS)

    def trainable_encoders(self, components: Components) -> list[torch.nn.Module]:
        return []

    # ------------------------------------------------------------ encoding

    def encode_prompts(self, components: Components, captions: list[str]) -> Conditioning:
        """The pipeline's prompt embedding, padded to `max_tokens` rows, and the mask of the real rows."""
        encoder, tokenizer = components.text_encoders[0], components.tokenizers[0]
        templated = [tokenizer.apply_chat_template([{"role": "user", "content": caption}], tokenize=False,
                                                   add_generation_prompt=True, enable_thinking=True)
                     for caption in captions]
        tokens = tokenizer(templated, padding="max_length", max_length=self.max_tokens, truncation=True,
                           return_tensors="pt")
        device = next(encoder.parameters()).device
        mask = to_device(tokens.attention_mask, device).bool()
        hidden = encoder(input_ids=to_device(tokens.input_ids, device), attention_mask=mask,
                         output_hidden_states=True).hidden_states[-2]
        return {"prompt_embeds": hidden, "prompt_mask": mask.to(hidden.dtype)}

    def noise_scheme(self, components: Components) -> NoiseScheme:
        return FlowMatchingScheme(components.scheduler, self.config.training)

    def predict(
        self, denoiser: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, cond: Conditioning
    ) -> torch.Tensor:
        dtype = input_dtype(denoiser, noisy.device)
        embeds, mask = cond["prompt_embeds"].to(dtype), cond["prompt_mask"] > 0.5
        captions = [embeds[i][mask[i]] for i in range(embeds.shape[0])]
        latents = list(noisy.to(dtype).unsqueeze(2).unbind(dim=0))
        out = denoiser(latents, (1000 - timesteps.float()) / 1000, captions, return_dict=False)[0]
        return -torch.stack(list(out), dim=0).squeeze(2)

    # ------------------------------------------------------------ sampling

    def make_pipeline(self, components: Components) -> Any:
        from diffusers import ZImagePipeline

        return ZImagePipeline(scheduler=components.sample_scheduler, vae=components.vae,
                              text_encoder=components.text_encoders[0], tokenizer=components.tokenizers[0],
                              transformer=components.denoiser)

    def sample_conditioning(self, pipeline: Any, prompt: str, negative: str) -> Conditioning:
        """The prompt's embedding rows and the negative prompt's (the pipeline's own negative is empty text)."""
        device = next(pipeline.text_encoder.parameters()).device
        positive, negative_embeds = pipeline.encode_prompt(
            prompt=prompt, device=device, do_classifier_free_guidance=True, negative_prompt=negative or None,
            max_sequence_length=self.max_tokens)
        return {"prompt_embeds": positive, "negative_prompt_embeds": negative_embeds}

    def denoise(self, pipeline: Any, conditioning: Conditioning, generator: torch.Generator, picture: Picture,
                references: Sequence[Any] = ()) -> Any:
        """The pipeline's denoising, with the embeddings moved to the transformer (the encoder may be offloaded)."""
        device = next(pipeline.transformer.parameters()).device
        moved: dict[str, Any] = {key: [t.to(device) for t in value] for key, value in conditioning.items()}
        return super().denoise(pipeline, moved, generator, picture, references)

    # ------------------------------------------------------------ outputs

    def kohya_layout(self, layers: dict[str, dict[str, torch.Tensor]],
                     adapter_configs: dict[str, dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The ComfyUI file (`diffusion_model.<module>.lora_down/lora_up/alpha`); a LoHa or LoKr keeps the
        LyCORIS layout (`lycoris_<module>`, `kohya_renames`)."""
        from studio.train.families.zimage_names import comfy_state_dict

        config = adapter_configs.get(self.denoiser_name, {})
        alpha = float(config.get("lora_alpha", self.config.method.lora_alpha))
        return comfy_state_dict(layers[self.denoiser_name], alpha, config.get("dora_scales"))


def merge_training_adapter(pipe: Any, path: str) -> None:
    """Merge the LoRA file at `path` into the pipeline's transformer for good (it is no adapter afterwards)."""
    file = Path(path)
    if not file.is_file():
        raise TrainError("model", f"model.training_adapter: {path} is not a file",
                         "point model.training_adapter at the training adapter's .safetensors file", path=path)
    try:
        pipe.load_lora_weights(str(file), adapter_name=ADAPTER_NAME)
    except (ValueError, KeyError, RuntimeError, OSError) as exc:
        raise TrainError("model", f"model.training_adapter: {path} is not a Z-Image LoRA the pipeline loads ({exc})",
                         "use a LoRA made for this Z-Image model (diffusers, ComfyUI or kohya layout)",
                         path=path) from exc
    pipe.fuse_lora(components=["transformer"], lora_scale=1.0, adapter_names=[ADAPTER_NAME])
    pipe.unload_lora_weights()


ADAPTER = ZImageAdapter
