"""One problem found before a run starts (`preflight.py`, `torch_probe.py`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PreflightProblem:
    check: str  # "model" | "dataset" | "output" | "disk" | "gpus" | "gpus_idle" | "vram" | "ram" | "ram_tight" | "torch"
    #             | "library" | "sample_prompts"
    message: str  # one line: what is wrong, where, and what to do
    # The person may go ahead anyway: a base model to download first, a VRAM estimate over the GPU.
    can_confirm: bool = False
    download: str | None = None  # the hub id to download first, when that is the fix

    def __str__(self) -> str:
        return self.message

    @property
    def question(self) -> str:
        """The title of the question a person confirms it with."""
        if self.check == "sample_prompts":
            return "Sample prompts"
        return "GPUs left idle" if self.check == "gpus_idle" else "This run may not fit"
