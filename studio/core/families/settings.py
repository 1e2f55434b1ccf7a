"""The settings that act only for some families: the noise recipes of each training objective.

A family's declaration lists the settings of its objective (`DDPM` or `FLOW_MATCHING`) plus
its own (SD1.5's clip skip, SD3's T5). A setting in some family's table but not in this
family's does not act for it; the schema refuses it and the GUI form hides it.
"""

from __future__ import annotations

from studio.core.families.spec import Condition, Setting

# DDPM noise schedules (SD1.5, SDXL): a noise level per timestep, epsilon or v targets.
DDPM: tuple[Setting, ...] = (
    Setting("model.prediction_type", "chooses the DDPM target (epsilon or v-prediction)",
            "flow matching always predicts the velocity from the image to the noise; leave it at \"auto\""),
    Setting("training.noise_offset", "adds a per-channel offset to DDPM noise",
            "flow matching shapes its noise levels with training.timestep_sampling; leave it at 0"),
    Setting("training.min_snr_gamma", "weights the DDPM loss by min-SNR",
            "weight the flow-matching loss with training.loss_weighting (sigma_sqrt or cosmap); leave it empty"),
)

# Flow matching (SD3): timesteps drawn from a density, the loss weighted per noise level.
_LOGIT_NORMAL = (Condition("training.timestep_sampling", ("logit_normal",)),)
FLOW_MATCHING: tuple[Setting, ...] = (
    Setting("training.timestep_sampling", "draws flow-matching timesteps",
            "DDPM families draw timesteps uniformly; weight them with training.min_snr_gamma"),
    Setting("training.loss_weighting", "weights the flow-matching loss per noise level",
            "use training.min_snr_gamma for DDPM families"),
    Setting("training.logit_mean", "is the mean of logit-normal timestep sampling",
            "DDPM families draw timesteps uniformly; leave it at 0", needs=_LOGIT_NORMAL),
    Setting("training.logit_std", "is the spread of logit-normal timestep sampling",
            "DDPM families draw timesteps uniformly; leave it at 1", needs=_LOGIT_NORMAL),
    Setting("training.mode_scale", "is the scale of mode timestep sampling",
            "DDPM families draw timesteps uniformly; leave it at 1.29",
            needs=(Condition("training.timestep_sampling", ("mode",)),)),
    Setting("training.shift", "shifts the flow-matching noise levels (sigmas) towards noise",
            "this family trains on its scheduler's own noise levels, unshifted; leave it empty"),
)

# Settings every family has that act only for one method or together with other settings.
_LORA = ("lora",)
_TEXT_ENCODER = (Condition("method.train_text_encoder", (True,)),)
_BUCKETS = (Condition("dataset.buckets", (True,)),)
COMMON: tuple[Setting, ...] = (
    Setting("method.rank", "is the LoRA's rank", "a DreamBooth run trains every weight; leave it at the default",
            methods=_LORA),
    Setting("method.alpha", "scales the LoRA", "a DreamBooth run trains every weight; leave it empty", methods=_LORA),
    Setting("method.dropout", "drops LoRA activations", "a DreamBooth run has no LoRA; leave it at 0", methods=_LORA),
    Setting("method.target_modules", "names the layers the LoRA wraps",
            "a DreamBooth run trains every layer; leave it empty", methods=_LORA),
    Setting("method.use_dora", "makes the LoRA weight-decomposed (DoRA)",
            "a DreamBooth run has no LoRA; leave it off", methods=_LORA),
    Setting("method.text_encoder_rank", "is the text encoders' LoRA rank",
            "a DreamBooth run trains the text encoders' every weight; leave it empty", methods=_LORA,
            needs=_TEXT_ENCODER),
    Setting("training.text_encoder_lr", "is the text encoders' learning rate", "leave it empty",
            needs=_TEXT_ENCODER),
    Setting("training.lr_warmup_steps", "is the learning rate's warm-up",
            "the constant schedule has no warm-up: choose constant_with_warmup, or leave it at 0",
            needs=(Condition("training.lr_scheduler", ("constant_with_warmup", "linear", "cosine",
                                                         "cosine_with_restarts", "polynomial")),)),
    Setting("training.lr_cycles", "is the number of cosine cycles (restarts)",
            "only cosine_with_restarts restarts: choose it, or leave lr_cycles at 1",
            needs=(Condition("training.lr_scheduler", ("cosine_with_restarts",)),)),
    Setting("training.lr_power", "is the polynomial schedule's power",
            "only the polynomial schedule has a power: choose it, or leave lr_power at 1",
            needs=(Condition("training.lr_scheduler", ("polynomial",)),)),
    Setting("training.epochs", "is the run's length in epochs",
            "training.max_steps sets the length; leave epochs empty (or max_steps, to count in epochs)",
            needs=(Condition("training.max_steps", (None,)),)),
    Setting("dataset.bucket_step", "is the aspect-ratio buckets' size step",
            "without buckets every image is cropped square; leave it at the default", needs=_BUCKETS),
    Setting("dataset.min_bucket", "is the smallest bucket side",
            "without buckets every image is cropped square; leave it at the default", needs=_BUCKETS),
    Setting("dataset.max_bucket", "is the largest bucket side",
            "without buckets every image is cropped square; leave it at the default", needs=_BUCKETS),
    Setting("dataset.keep_tokens", "keeps the first tags in place when they are shuffled",
            "captions are used as written; leave it at 0", needs=(Condition("dataset.shuffle_tags", (True,)),)),
    Setting("dataset.mask_folder", "names the folder of loss masks",
            "the masks come from that folder only with dataset.masks = \"folder\"; leave it empty",
            needs=(Condition("dataset.masks", ("folder",)),)),
)

# LyCORIS networks (every family) and the exponential moving average of the trained weights.
_LOKR = (Condition("method.network", ("lokr",)),)
_EMA = (Condition("training.ema", (True,)),)
NETWORKS: tuple[Setting, ...] = (
    Setting("method.network", "chooses the adapter's kind (lora, locon, loha, lokr)",
            "a DreamBooth run trains every weight; leave it at \"lora\"", methods=_LORA),
    Setting("method.lokr_factor", "is the LoKr's Kronecker factor",
            "only a LoKr has one; set method.network = \"lokr\" or leave it empty", methods=_LORA, needs=_LOKR),
)
EMA: tuple[Setting, ...] = (
    Setting("training.ema_decay", "is the EMA's decay", "leave it at the default", needs=_EMA),
    Setting("training.ema_every", "is how often the EMA is updated", "leave it at 1", needs=_EMA),
    Setting("training.ema_on_cpu", "keeps the EMA in CPU memory", "leave it off", needs=_EMA),
    Setting("training.ema_for_samples", "makes the samples with the EMA weights", "leave it off", needs=_EMA),
)
# The UNet families' convolution layers (resnets, down- and upsamplers); the transformers have none
# but their patch embedding.
_CONV_NETWORKS = (Condition("method.network", ("locon", "loha", "lokr")),)
CONVOLUTIONS: tuple[Setting, ...] = (
    Setting("method.conv_rank", "is the rank of the adapter on the convolution layers",
            "this family's denoiser is a transformer without convolution layers to adapt; leave it empty",
            methods=_LORA, needs=_CONV_NETWORKS),
    Setting("method.conv_alpha", "scales the adapter on the convolution layers",
            "this family's denoiser is a transformer without convolution layers to adapt; leave it empty",
            methods=_LORA, needs=_CONV_NETWORKS),
)
COMMON = (*COMMON, *NETWORKS, *EMA)

# Settings that change how a run computes, not what it learns (the same losses and weights, to
# rounding): each with the reason, for the test that every other setting acts.
NEUTRAL: dict[str, str] = {
    "training.gradient_checkpointing": "recomputes activations in the backward pass: memory, not results",
    "training.checkpointing_interval": "which blocks recompute under gradient checkpointing: memory, not results",
    "training.cache_latents": "encodes each image once instead of every step: the same latents",
    "training.cache_latents_to_disk": "keeps the cached latents on disk: the same latents",
    "training.cache_text_embeddings": "encodes each caption once instead of every step: the same embeddings",
    "training.dataloader_workers": "reads batches in worker processes: the same batches",
    "training.compile": "compiles the denoiser: the same computation, faster",
    "model.dtype": "the frozen weights' precision on a GPU; a CPU run keeps them in fp32",
    "model.blocks_to_swap": "copies the frozen blocks' weights to the device just ahead of use: the same weights",
    "model.text_encoder_on_cpu": "encodes the cached captions in system memory: the same embeddings",
    "model.allow_pickle": "lets a pickle base model load as data; a safetensors base is read the same",
    "training.fill_card": "changes the batch and checkpointing at launch, for a GPU; the trainer gets a plain config",
}

# The transformer families' frozen blocks kept in system memory (studio/train/memory/block_swap.py).
BLOCK_SWAP = Setting("model.blocks_to_swap", "keeps the frozen weights of the denoiser's last blocks in system memory",
                     "it swaps the repeated transformer blocks of a LoRA's frozen base (a UNet family has none, and "
                     "a full fine-tune trains the very weights it would keep away); lower the memory with "
                     "training.gradient_checkpointing instead (a LoRA also with model.fp8_base), and leave it at 0",
                     methods=_LORA)

# Settings of one family, each declared by the family that has it.
CLIP_SKIP = Setting("model.clip_skip", "picks the text encoder's layer, counted from the end",
                    "this family always takes the text encoder layers its own pipeline takes; leave it at 1")
T5 = Setting("model.use_t5", "loads the T5 text encoder", "this family has no T5 text encoder; leave it off")
BLOCKS = Setting("method.blocks", "limits the LoRA to some transformer blocks",
                 "leave it empty (a DreamBooth run trains every block; method.target_modules chooses a LoRA's "
                 "layers)", methods=_LORA)
# The UNet families and SD3 load model.vae in place of the base's VAE; the others encode with their folder's own.
SEPARATE_VAE = Setting("model.vae", "replaces the base model's VAE with another one",
                       "this family's latents are its own VAE's (the base folder's vae/); leave it empty")
TRAINING_ADAPTER = Setting("model.training_adapter",
                           "merges a step-distilled model's training adapter into the base for training",
                           "this family's bases are trained as they are; leave it empty")

# Settings the studio offers a family to declare (its trainer does what they say): until one does, each is
# refused for every family, so a file that sets it never trains something other than what it says.
OFFERED: tuple[Setting, ...] = (TRAINING_ADAPTER,)

__all__ = ["BLOCKS", "CLIP_SKIP", "COMMON", "CONVOLUTIONS", "DDPM", "FLOW_MATCHING", "NEUTRAL", "OFFERED",
           "SEPARATE_VAE", "T5", "TRAINING_ADAPTER", "Condition"]
