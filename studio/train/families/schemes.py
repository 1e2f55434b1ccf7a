"""How a family noises latents and what its network learns to predict.

`DiffusionScheme` is the DDPM recipe of SD1.x/2.x and SDXL (epsilon or v-prediction,
optional min-SNR weighting and noise offset); `FlowMatchingScheme` is SD3's rectified
flow (timesteps drawn by a density, optional loss weighting by sigma).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from studio.core.config.schema import TrainingSection
from studio.train.memory.transfer import to_device


@dataclass
class Noised:
    """A noised batch: the network's input, its timesteps, the target and per-sample loss weights."""

    noisy: torch.Tensor
    timesteps: torch.Tensor
    target: torch.Tensor
    weights: torch.Tensor  # (batch,), multiplied into each sample's loss


class NoiseScheme(Protocol):
    def noise(self, latents: torch.Tensor, generator: torch.Generator) -> Noised: ...

    def loss(self, prediction: torch.Tensor, noised: Noised, sample_weights: torch.Tensor) -> torch.Tensor: ...


def noise_for_rank(scheme: NoiseScheme, latents: torch.Tensor, generator: torch.Generator, rank: int,
                   world: int) -> Noised:
    """This rank's part of the noise drawn for the whole global batch from `generator` (seeded alike on every
    rank): an image's noise and timestep do not depend on how many ranks split the batch, so 2 GPUs with
    batch 2 train what 1 GPU with batch 4 trains. With one rank it is `scheme.noise` itself."""
    if world == 1:
        return scheme.noise(latents, generator)
    batch = latents.shape[0]
    mine = slice(rank * batch, (rank + 1) * batch)
    whole = latents.new_zeros((batch * world, *latents.shape[1:]))
    whole[mine] = latents
    noised = scheme.noise(whole, generator)
    return Noised(noised.noisy[mine], noised.timesteps[mine], noised.target[mine], noised.weights[mine])


def randn_like_on_cpu(shape: tuple[int, ...], generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Noise drawn on the CPU from `generator`, so a run is reproducible on any device (copied
    to the GPU without stalling the step)."""
    return to_device(torch.randn(shape, generator=generator, dtype=torch.float32), like.device, like.dtype)


def weighted_mse(prediction: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean squared error per sample, times its weight, averaged over the batch."""
    per_sample = F.mse_loss(prediction.float(), target.float(), reduction="none")
    per_sample = per_sample.mean(dim=list(range(1, per_sample.ndim)))
    return (per_sample * to_device(weights, per_sample.device)).mean()


class DiffusionScheme:
    """DDPM training: random timesteps, noise added by the scheduler, epsilon or velocity target."""

    def __init__(self, scheduler: Any, training: TrainingSection) -> None:
        self.scheduler = scheduler
        self.prediction_type: str = scheduler.config.prediction_type
        if self.prediction_type not in ("epsilon", "v_prediction"):
            raise ValueError(
                f"prediction type {self.prediction_type!r} is not trainable here; use epsilon or v_prediction"
            )
        self.noise_offset = training.noise_offset
        self.min_snr_gamma = training.min_snr_gamma
        self.timesteps = int(scheduler.config.num_train_timesteps)

    def noise(self, latents: torch.Tensor, generator: torch.Generator) -> Noised:
        batch = latents.shape[0]
        noise = randn_like_on_cpu(tuple(latents.shape), generator, latents)
        if self.noise_offset:
            offset = randn_like_on_cpu((batch, latents.shape[1], 1, 1), generator, latents)
            noise = noise + self.noise_offset * offset
        timesteps = to_device(torch.randint(0, self.timesteps, (batch,), generator=generator), latents.device)
        noisy = self.scheduler.add_noise(latents, noise, timesteps)
        if self.prediction_type == "epsilon":
            target = noise
        else:
            target = self.scheduler.get_velocity(latents, noise, timesteps)
        return Noised(noisy, timesteps, target, self._snr_weights(timesteps))

    def _snr_weights(self, timesteps: torch.Tensor) -> torch.Tensor:
        if self.min_snr_gamma is None:
            return torch.ones(timesteps.shape[0], device=timesteps.device)
        from diffusers.training_utils import compute_snr

        snr = compute_snr(self.scheduler, timesteps)
        clipped = torch.clamp(snr, max=self.min_snr_gamma)
        # Min-SNR-gamma (Hang et al. 2023): for v-prediction the target's scale adds one to the SNR.
        if self.prediction_type == "v_prediction":
            return clipped / (snr + 1)
        # A zero-terminal-SNR schedule's last timestep has an SNR of 0: its weight is the limit, 1 (not 0/0,
        # a NaN loss that ended the run at the first batch drawing it).
        return torch.where(snr > 0, clipped / snr.clamp(min=torch.finfo(snr.dtype).tiny), torch.ones_like(snr))

    def loss(self, prediction: torch.Tensor, noised: Noised, sample_weights: torch.Tensor) -> torch.Tensor:
        return weighted_mse(prediction, noised.target, noised.weights * to_device(sample_weights, noised.weights.device))


class FlowMatchingScheme:
    """Rectified flow (SD3): x_t = (1 - sigma) x_0 + sigma * noise; the network predicts noise - x_0.

    Timesteps are drawn by `training.timestep_sampling` (logit-normal, mode or uniform) and
    mapped onto the scheduler's shifted sigma schedule (`training.shift`, else the scheduler's), as the
    diffusers SD3 scripts do;
    `training.loss_weighting` (none, sigma_sqrt, cosmap) weights each sample's loss.
    """

    def __init__(self, scheduler: Any, training: TrainingSection) -> None:
        from diffusers import FlowMatchEulerDiscreteScheduler

        # A fresh copy: the sampling pipeline's scheduler changes its timesteps when it samples. training.shift
        # replaces the scheduler's shift (sigma' = shift * sigma / (1 + (shift - 1) * sigma)) for training only.
        shift = {} if training.shift is None else {"shift": training.shift}
        fresh: Any = FlowMatchEulerDiscreteScheduler.from_config(scheduler.config, **shift)
        self.timesteps = fresh.timesteps.float()
        self.sigmas = fresh.sigmas.float()
        self.num_train_timesteps = int(fresh.config.num_train_timesteps)
        self.sampling = training.timestep_sampling
        self.weighting = training.loss_weighting
        self.logit_mean, self.logit_std, self.mode_scale = training.logit_mean, training.logit_std, training.mode_scale

    def noise(self, latents: torch.Tensor, generator: torch.Generator) -> Noised:
        from diffusers.training_utils import (
            compute_density_for_timestep_sampling,
            compute_loss_weighting_for_sd3,
        )

        batch = latents.shape[0]
        noise = randn_like_on_cpu(tuple(latents.shape), generator, latents)
        u = compute_density_for_timestep_sampling(
            weighting_scheme=self.sampling, batch_size=batch, logit_mean=self.logit_mean,
            logit_std=self.logit_std, mode_scale=self.mode_scale, device="cpu", generator=generator,
        )
        indices = (u * self.num_train_timesteps).long().clamp(0, self.num_train_timesteps - 1)
        sigmas = self.sigmas[indices]
        timesteps = to_device(self.timesteps[indices], latents.device)
        shaped = to_device(sigmas.view(batch, *([1] * (latents.ndim - 1))), latents.device, latents.dtype)
        noisy = (1.0 - shaped) * latents + shaped * noise
        weights = compute_loss_weighting_for_sd3(self.weighting, sigmas).float()
        return Noised(noisy, timesteps, noise - latents, to_device(weights, latents.device))

    def loss(self, prediction: torch.Tensor, noised: Noised, sample_weights: torch.Tensor) -> torch.Tensor:
        return weighted_mse(prediction, noised.target, noised.weights * to_device(sample_weights, noised.weights.device))
