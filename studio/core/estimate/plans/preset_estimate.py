"""A preset's promise (its min_vram_gb, per GPU) against the estimate of the preset as a person runs it.

A preset promises a card size with its sample images on: the estimate applies the preset
to the project's config (or to a placeholder project) and turns samples on when it has
none, at the preset's sample size and steps. A preset made for several GPUs (`gpus`) is estimated
per GPU with that many processes.
"""

from __future__ import annotations

from dataclasses import dataclass

from studio.core.config.files.paths import NO_FOLDER, ResolvedConfig, resolve_paths
from studio.core.config.files.presets import Preset, apply_preset, preset_size, size_base_for
from studio.core.config.schema import TrainConfig
from studio.core.estimate.estimate import VramEstimate, estimate_vram
from studio.core.estimate.plans.fixes import apply_changes
from studio.core.families import family
from studio.core.hardware.report import GPUInfo

SAMPLE_EVERY_N_STEPS = 100  # when neither the preset nor the project says how often
SAMPLE_PROMPT = "a photo"  # when the project has no prompt: the words do not change the memory


def placeholder_project(family: str, base_model: str = "base-model") -> ResolvedConfig:
    """A project of `family` that is in no folder: its images name nothing on this machine."""
    return resolve_paths(TrainConfig.model_validate({"model": {"family": family, "base": base_model},
                                                     "dataset": {"concepts": [{"path": "images"}]}}), NO_FOLDER)


def applied_at_its_size(preset: Preset, project: ResolvedConfig) -> ResolvedConfig:
    """`preset` applied to `project`, on the preset's own size of its family when the project trains another:
    a 9B preset is estimated on the 9B whatever the project's base (raises ConfigError)."""
    config = apply_preset(project, preset)
    base = size_base_for(preset, project)
    return project.varied(apply_changes(config, {"model.base": base}) if base is not None else config)


def preset_config(preset: Preset, project: ResolvedConfig | None = None) -> ResolvedConfig:
    """`preset` applied to `project` (or a placeholder), with sample images on (raises ConfigError)."""
    base = project
    if base is None:
        sizes = family(preset.family).size_bases  # a family of several sizes: the one the preset's id names
        size = preset_size(preset) or next(iter(sizes), None)
        base = placeholder_project(preset.family, *([sizes[size]] if size is not None else []))
    config = applied_at_its_size(preset, base)
    sampling = config.sampling
    every = sampling.every_n_steps or base.sampling.every_n_steps or SAMPLE_EVERY_N_STEPS
    prompts = sampling.prompts or [SAMPLE_PROMPT]
    if (every, prompts) == (sampling.every_n_steps, sampling.prompts):
        return base.varied(config)
    data = config.model_dump()
    data["sampling"].update(every_n_steps=every, prompts=prompts)
    return base.varied(TrainConfig.model_validate(data))


def promised_gpu(preset: Preset) -> GPUInfo:
    """A card of exactly the size the preset promises, all of it free."""
    mb = int(preset.min_vram_gb * 1024)
    return GPUInfo(index=0, name=f"a {preset.min_vram_gb:g} GB GPU", total_mb=mb, free_mb=mb)


@dataclass
class PresetEstimate:
    preset: Preset
    estimate: VramEstimate
    gpu: GPUInfo

    @property
    def promise_gb(self) -> float:
        return self.preset.min_vram_gb

    @property
    def keeps_promise(self) -> bool:
        return self.estimate.total_gb <= self.promise_gb

    def summary(self) -> str:
        """"promises 8 GB · estimated 7.6 GB with samples" (the estimate on `gpu`); for several GPUs
        "promises 2 × 24 GB · estimated 23.0 GB per GPU with samples"."""
        if self.preset.gpus > 1:
            return (f"promises {self.preset.gpus} × {self.promise_gb:g} GB · estimated "
                    f"{self.estimate.total_gb:.1f} GB per GPU with samples")
        return f"promises {self.promise_gb:g} GB · estimated {self.estimate.total_gb:.1f} GB with samples"


def estimate_preset(preset: Preset, gpu: GPUInfo | None = None,
                    project: ResolvedConfig | None = None) -> PresetEstimate:
    """The preset's estimate with samples on `gpu` (a card of the promised size when none is given)."""
    card = gpu if gpu is not None else promised_gpu(preset)
    return PresetEstimate(preset, estimate_vram(preset_config(preset, project), card), card)
