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
FLOW_MATCHING: tuple[Setting, ...] = (
    Setting("training.timestep_sampling", "draws flow-matching timesteps",
            "DDPM families draw timesteps uniformly; weight them with training.min_snr_gamma"),
    Setting("training.loss_weighting", "weights the flow-matching loss per noise level",
            "use training.min_snr_gamma for DDPM families"),
    Setting("training.logit_mean", "is the mean of logit-normal timestep sampling",
            "DDPM families draw timesteps uniformly; leave it at 0"),
    Setting("training.logit_std", "is the spread of logit-normal timestep sampling",
            "DDPM families draw timesteps uniformly; leave it at 1"),
    Setting("training.mode_scale", "is the scale of mode timestep sampling",
            "DDPM families draw timesteps uniformly; leave it at the default"),
)

# Settings of one family, each declared by the family that has it.
CLIP_SKIP = Setting("model.clip_skip", "picks the text encoder's layer, counted from the end",
                    "this family always uses its text encoders' penultimate layer; leave it at 1")
T5 = Setting("model.use_t5", "loads the T5 text encoder", "this family has no T5 text encoder; leave it off")
BLOCKS = Setting("method.blocks", "limits the LoRA to some transformer blocks",
                 "leave it empty (use method.target_modules to choose the LoRA's layers)")

__all__ = ["BLOCKS", "CLIP_SKIP", "DDPM", "FLOW_MATCHING", "T5", "Condition"]
