"""FLUX.2 [klein] (4B and 9B): the Flux2 transformer trained by flow matching, as diffusers' [klein] example does.

- Text: the Qwen3 encoder's hidden states after layers 9, 18 and 27 side by side (what
  `Flux2KleinPipeline` samples with), one token row per chat-templated prompt token.
- Images: the Flux.2 VAE's latents (the distribution's mode), patchified 2x2 and normalised by
  the VAE's batch-norm statistics; the noise scheme works on these, so cached latents are final.
- Noise: rectified flow on the scheduler's own (unshifted) training schedule with the configured
  timestep density and loss weighting; the transformer sees the timestep / 1000 and, for a
  guidance-distilled transformer only, the guidance value.
- Prediction: latents packed to one token per position with (t, h, w, l) position ids, the
  output cut to the image tokens and scattered back to the latent grid.
- Edit pairs: each control's latents (encoded as the targets') packed after the image tokens with the
  time coordinate 10, 20, ... per control, exactly as `Flux2KleinPipeline(image=...)` samples; the
  loss reads the target's tokens only.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from studio.core.families import flux2_klein as declared
from studio.train.components import Components
from studio.train.errors import TrainError
from studio.train.families.base import REFERENCES, Conditioning, FamilyAdapter, draw_latents
from studio.train.families.loading import folder_dtypes, hub_options, load_or_fail, model_source
from studio.train.families.schemes import FlowMatchingScheme, NoiseScheme
from studio.train.memory.precision import input_dtype
from studio.train.memory.transfer import to_device
from studio.train.pipelines.flux2_klein import TEXT_LAYERS

NEEDS = {"text_encoder": "the Qwen3 text encoder", "tokenizer": "the Qwen tokenizer",
         "transformer": "the Flux2 transformer", "vae": "the Flux.2 VAE"}
# The prompt length its declaration gives (the pipeline's default); a smaller tokenizer limit (the tiny model's) wins.
MAX_TOKENS = declared.FAMILY.caption_token_limit
# The example's LoRA targets: the double-stream blocks' image attention and every single-stream
# block's fused projections (the output projections by name: a double block's attn.to_out is a list).
DOUBLE_TARGETS = ("to_k", "to_q", "to_v", "to_out.0")
SINGLE_TARGET = "to_qkv_mlp_proj"
# transformer joint_attention_dim -> the published size it belongs to.
SIZES = {7680: "4b", 12288: "9b"}


class Flux2KleinAdapter(FamilyAdapter):
    family: ClassVar[str] = "flux2-klein"
    text_encoder_names: ClassVar[tuple[str, ...]] = ("text_encoder",)
    rename_lora_keys: ClassVar[bool] = False
    kohya_base_version: ClassVar[str] = "flux2_klein"
    kohya_architecture: ClassVar[str] = "flux-2-klein"
    prompt_embedding_names: ClassVar[tuple[str, ...]] = ("prompt_embeds", "negative_prompt_embeds")

    single_blocks = 0
    size: str | None = None  # "4b" or "9b" once loaded (None: another size, such as the tiny test model)
    max_tokens = MAX_TOKENS
    guidance_embeds = False
    # The position ids of each batch shape trained so far (see _position_ids); made on the first step.
    position_ids: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] | None = None
    # Edit pairs: the position ids of each shape of reference latents trained so far (see _reference_ids).
    reference_ids: dict[tuple[Any, ...], torch.Tensor] | None = None

    # ------------------------------------------------------------ loading

    def load(self, device: torch.device, weight_dtype: torch.dtype) -> Components:
        from diffusers import Flux2KleinPipeline

        model, method = self.config.model, self.config.method
        if method.train_text_encoder:
            raise TrainError("config", "method.train_text_encoder = true: FLUX.2 [klein] trains its transformer only "
                             "(the Qwen3 encoder's embeddings are read from three of its layers)",
                             "set method.train_text_encoder = false")
        base = model.base
        source = model_source(base, self.family, NEEDS)
        if source == "file":
            raise TrainError("model", f"{base} is a single file; FLUX.2 [klein] trains from a diffusers folder or "
                             "hub id (transformer, VAE and Qwen3 encoder together)",
                             "point model.base at a diffusers folder, e.g. black-forest-labs/FLUX.2-klein-base-4B",
                             path=base)
        dtypes = self.load_dtypes(weight_dtype)
        options: dict[str, Any] = {"revision": model.revision, "variant": model.variant, **folder_dtypes(dtypes),
                                   **hub_options(base, model.revision, model.variant)}
        pipe = load_or_fail("pipeline", base, lambda: Flux2KleinPipeline.from_pretrained(base, **options))
        transformer, vae, encoder = pipe.transformer, pipe.vae, pipe.text_encoder
        self.single_blocks = len(transformer.single_transformer_blocks)
        self.guidance_embeds = bool(transformer.config.guidance_embeds)
        self.max_tokens = min(MAX_TOKENS, int(getattr(pipe.tokenizer, "model_max_length", MAX_TOKENS)))
        self.size = SIZES.get(int(transformer.config.joint_attention_dim))
        self.place_frozen(transformer, vae, [encoder], device, weight_dtype, dtypes)
        return Components(transformer, vae, [encoder], [pipe.tokenizer], pipe.scheduler, pipe.scheduler,
                          extras={"is_distilled": bool(pipe.config.is_distilled)})

    def default_lora_targets(self) -> list[str]:
        singles = [f"single_transformer_blocks.{i}.attn.to_out" for i in range(self.single_blocks)]
        return [*DOUBLE_TARGETS, SINGLE_TARGET, *singles]

    def trainable_encoders(self, components: Components) -> list[torch.nn.Module]:
        return []

    # ------------------------------------------------------------ encoding

    def encode_prompts(self, components: Components, captions: list[str]) -> Conditioning:
        from diffusers import Flux2KleinPipeline

        encoder, tokenizer = components.text_encoders[0], components.tokenizers[0]
        embeds = Flux2KleinPipeline._get_qwen3_prompt_embeds(
            encoder, tokenizer, list(captions), max_sequence_length=self.max_tokens,
            hidden_states_layers=list(TEXT_LAYERS),
        )
        return {"prompt_embeds": embeds}

    def encode_images(
        self, components: Components, pixels: torch.Tensor, draws: list[torch.Generator] | None = None
    ) -> torch.Tensor:
        """Latents of the VAE's distribution (a sample with `draws`, else the mean), patchified 2x2 and
        normalised by the VAE's batch-norm statistics."""
        from diffusers import Flux2KleinPipeline

        vae: Any = components.vae
        latents = draw_latents(vae.encode(pixels.to(vae.device, vae.dtype)).latent_dist, draws)
        latents = Flux2KleinPipeline._patchify_latents(latents)
        mean, std = _batch_norm_statistics(vae, latents)
        return (latents - mean) / std

    def noise_scheme(self, components: Components) -> NoiseScheme:
        return FlowMatchingScheme(components.scheduler, self.config.training)

    def predict(
        self, denoiser: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, cond: Conditioning
    ) -> torch.Tensor:
        from diffusers import Flux2KleinPipeline

        dtype = input_dtype(denoiser, noisy.device)
        embeds = cond["prompt_embeds"].to(dtype)
        batch, _channels, height, width = noisy.shape
        image_ids, text_ids = self._position_ids(noisy, embeds)
        packed = Flux2KleinPipeline._pack_latents(noisy.to(dtype))
        tokens, ids = packed, image_ids
        if REFERENCES in cond:  # edit pairs: the controls' tokens after the image's, as the pipeline's image=
            references = cond[REFERENCES].to(dtype)
            tokens = torch.cat([packed, _reference_tokens(references)], dim=1)
            ids = torch.cat([image_ids, self._reference_ids(references, noisy.device)], dim=1)
        guidance = None
        if self.guidance_embeds:
            guidance = torch.full((batch,), float(self.config.sampling.guidance), device=noisy.device)
        out = denoiser(hidden_states=tokens, timestep=timesteps.to(dtype) / 1000, guidance=guidance,
                       encoder_hidden_states=embeds, txt_ids=text_ids, img_ids=ids, return_dict=False)[0]
        out = out[:, : packed.shape[1]]  # the loss is the target's tokens' alone
        unpacked: torch.Tensor = Flux2KleinPipeline._unpack_latents_with_ids(out, image_ids, height, width)
        return unpacked

    def _position_ids(self, noisy: torch.Tensor, embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The image and text position ids of a batch of this shape, made once per shape and kept on the device:
        made every step, they cost ~70 small ops and two copies from pageable host memory, each of which waits
        on a GPU for the steps queued before it."""
        from diffusers import Flux2KleinPipeline

        key = (*noisy.shape, *embeds.shape[:2], noisy.device)
        if self.position_ids is None:
            self.position_ids = {}
        cache = self.position_ids
        if key not in cache:
            cache[key] = (to_device(Flux2KleinPipeline._prepare_latent_ids(noisy), noisy.device),
                          to_device(Flux2KleinPipeline._prepare_text_ids(embeds), noisy.device))
        return cache[key]

    def _reference_ids(self, references: torch.Tensor, device: torch.device) -> torch.Tensor:
        """The position ids of a batch's (B, controls, C, h, w) reference latents, made once per shape and kept on
        `device` as the image's are (made on the host every step, their copy waited on the steps queued before it)."""
        key = (*references.shape, device)
        if self.reference_ids is None:
            self.reference_ids = {}
        cache = self.reference_ids
        if key not in cache:
            cache[key] = to_device(_reference_ids(references), device)
        return cache[key]

    # ------------------------------------------------------------ sampling

    def make_pipeline(self, components: Components) -> Any:
        from diffusers import Flux2KleinPipeline

        return Flux2KleinPipeline(
            scheduler=components.sample_scheduler, vae=components.vae, text_encoder=components.text_encoders[0],
            tokenizer=components.tokenizers[0], transformer=components.denoiser,
            is_distilled=bool(components.extras.get("is_distilled", False)),
        )

    def sample_conditioning(self, pipeline: Any, prompt: str, negative: str) -> Conditioning:
        """The prompt's embeddings and the negative prompt's (the pipeline's own negative is empty text)."""
        device = next(pipeline.text_encoder.parameters()).device
        positive, _ = pipeline.encode_prompt(prompt=prompt, device=device, max_sequence_length=self.max_tokens,
                                             text_encoder_out_layers=TEXT_LAYERS)
        negative_embeds, _ = pipeline.encode_prompt(prompt=negative or "", device=device,
                                                    max_sequence_length=self.max_tokens,
                                                    text_encoder_out_layers=TEXT_LAYERS)
        return {"prompt_embeds": positive, "negative_prompt_embeds": negative_embeds}

    def decode(self, vae: Any, latents: torch.Tensor) -> torch.Tensor:
        """The pipeline's latents are already de-normalised and unpatchified: the VAE decodes them as they are."""
        image: torch.Tensor = vae.decode(latents.to(vae.device, vae.dtype), return_dict=False)[0]
        return image

    # ------------------------------------------------------------ outputs

    def kohya_architecture_name(self) -> str:
        return f"{self.kohya_architecture}-{self.size}" if self.size else self.kohya_architecture

    def lycoris_name(self, component: str, module: str) -> str:
        """The original layer's name where there is one, as ComfyUI reads it (flux2_klein_names.lycoris_module)."""
        from studio.train.families.flux2_klein_names import lycoris_module

        return lycoris_module(module) if component == self.denoiser_name else super().lycoris_name(component, module)

    def kohya_layout(self, layers: dict[str, dict[str, torch.Tensor]],
                     adapter_configs: dict[str, dict[str, Any]]) -> dict[str, torch.Tensor]:
        """The ComfyUI file in the original layout (`lora_unet_double_blocks_...`); LoHa/LoKr files are named
        by lycoris_name."""
        from studio.train.families.flux2_klein_names import comfy_state_dict

        config = adapter_configs.get(self.denoiser_name, {})
        alpha = float(config.get("lora_alpha", self.config.method.lora_alpha))
        return comfy_state_dict(layers[self.denoiser_name], alpha, config.get("dora_scales"))


def _reference_tokens(references: torch.Tensor) -> torch.Tensor:
    """(B, controls, C, h, w) reference latents -> their packed tokens, one control after the other, as
    Flux2KleinPipeline.prepare_image_latents packs them."""
    from diffusers import Flux2KleinPipeline

    count = references.shape[1]
    return torch.cat([Flux2KleinPipeline._pack_latents(references[:, i]) for i in range(count)], dim=1)


def _reference_ids(references: torch.Tensor) -> torch.Tensor:
    """The position ids of (B, controls, C, h, w) reference latents, on the host: the time coordinate 10, 20, ...
    per control (Flux2KleinPipeline.prepare_image_latents's)."""
    from diffusers import Flux2KleinPipeline

    batch, count = references.shape[:2]
    ids: torch.Tensor = Flux2KleinPipeline._prepare_image_ids([references[:1, i] for i in range(count)])
    return ids.repeat(batch, 1, 1)


def _batch_norm_statistics(vae: Any, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The Flux.2 VAE's latent normalisation: its batch norm's running mean and standard deviation."""
    bn = vae.bn
    mean = bn.running_mean.view(1, -1, 1, 1).to(like.device, like.dtype)
    std = torch.sqrt(bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(like.device, like.dtype)
    return mean, std


ADAPTER = Flux2KleinAdapter
