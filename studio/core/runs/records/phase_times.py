"""Where a run's time went, as one line a person reads at the end of a run.

The trainer times each part of a run (loading the model, text encoding, caching latents, fp8
conversion, compiling, the steps, samples, saving) and writes the totals on its `run_finished`
event; the console, `studio-train` and the Train page show them with this one function, so a slow
phase of a low-VRAM preset (text encoding on the CPU, say) is seen without reading the events.
"""

from __future__ import annotations

from studio.core.runs.events import PhaseTime

# Parts shorter than this are left out of the line (they are still in the event).
SHOWN_FROM_S = 0.05


def _seconds(value: float) -> str:
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s" if value >= 1 else f"{value:.2f} s"


def phase_summary(phases: list[PhaseTime], images_per_s: float | None = None) -> str:
    """'loading 12.3 s, text encoding 4.1 s, steps 2.0 min (9.5 images/s), saving 1.2 s' ('' with no phases)."""
    parts = []
    for phase in phases:
        if phase.seconds < SHOWN_FROM_S:
            continue
        text = f"{phase.name} {_seconds(phase.seconds)}"
        if phase.name == "steps" and images_per_s:
            text += f" ({images_per_s:.3g} images/s)"
        parts.append(text)
    return ", ".join(parts)
