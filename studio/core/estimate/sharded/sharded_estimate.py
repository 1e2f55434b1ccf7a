"""DDP beside FSDP: the per-GPU peak of one config on N GPUs both ways, and which to propose.

`studio-train estimate CONFIG --gpus N` prints both; the Model page's plan for a machine with
several GPUs shows both and proposes FSDP when DDP does not fit (`sharded_parts.py` has what a
sharded run holds beyond its shares).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from studio.core.config.errors import issues_from_validation
from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.schema import Strategy, TrainConfig
from studio.core.estimate.estimate import Fit, VramEstimate, estimate_vram, fit
from studio.core.hardware.report import GPUInfo


@dataclass
class GpuPlan:
    """Per-GPU peaks of one config on `gpus` GPUs of the `gpu` kind, as DDP and as FSDP."""

    gpus: int
    ddp: VramEstimate
    fsdp: VramEstimate | None
    fsdp_refused: str  # why FSDP does not apply (LoRA, fp16), when it does not
    ddp_fit: Fit | None
    fsdp_fit: Fit | None

    @property
    def proposes_fsdp(self) -> bool:
        """DDP does not fit, FSDP does."""
        return self.ddp_fit == "does_not_fit" and self.fsdp_fit in ("fits", "tight")

    @property
    def changes(self) -> dict[str, Any]:
        """The config changes that train this way with FSDP."""
        return {"launch.strategy": "fsdp", "launch.num_processes": self.gpus}


def with_strategy(config: ResolvedConfig, gpus: int, strategy: Strategy) -> ResolvedConfig:
    """`config` on `gpus` processes with `strategy` (raises ValidationError when the pair is refused)."""
    data = config.model_dump()
    data["launch"].update(num_processes=max(gpus, data["launch"]["num_machines"]), strategy=strategy)
    return config.varied(TrainConfig.model_validate(data))


def run_config(config: ResolvedConfig, gpu: GPUInfo | None, gpus: int) -> ResolvedConfig:
    """`config` as it would run on `gpus` GPUs like `gpu`: a data-parallel run that does not fit them
    becomes sharded where that fits (the bundle's and the cost table's choice)."""
    if gpus > 1 and config.launch.strategy == "ddp" and plan_gpus(config, gpu, gpus).proposes_fsdp:
        return with_strategy(config, gpus, "fsdp")
    return with_strategy(config, gpus, config.launch.strategy)


def plan_gpus(config: ResolvedConfig, gpu: GPUInfo | None, gpus: int) -> GpuPlan:
    """The per-GPU estimate of `config` on `gpus` GPUs like `gpu`, data parallel and fully sharded."""
    ddp = estimate_vram(with_strategy(config, gpus, "ddp"), gpu)
    try:
        fsdp: VramEstimate | None = estimate_vram(with_strategy(config, gpus, "fsdp"), gpu)
        refused = ""
    except ValidationError as exc:
        fsdp, refused = None, "; ".join(str(i) for i in issues_from_validation(exc, TrainConfig))
    if gpus < 2 and fsdp is not None:
        fsdp, refused = None, "one GPU: nothing to shard"
    return GpuPlan(gpus, ddp, fsdp, refused, fit(ddp, gpu) if gpu else None,
                   fit(fsdp, gpu) if gpu and fsdp is not None else None)
