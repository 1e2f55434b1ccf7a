"""A low-VRAM preset's run, phase by phase, against the 24 GB preset of its model.

The speed issue asks that no phase of a low-VRAM preset's run (loading, text encoding on the CPU, fp8
conversion, caching, steps, each sample) take more than twice the same phase of the 24 GB preset of
its model and method (the largest preset up to 24 GB where the model has no 24 GB one). The GPU acceptance runs both under their caps; each run's `run_finished` event
says its phases (rows' `phases`). This table holds them side by side; a phase over 2x is marked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LIMIT = 2.0  # the bound: each phase at most twice the 24 GB preset's
REFERENCE_GB = 24  # the reference: the model's preset of the largest promise up to this


def phase_comparison(rows: list[Any], model_of: Callable[[str], str]) -> str:
    """Markdown: each lower-VRAM preset's phases against its model's and method's reference preset (the one of
    the largest promise up to 24 GB), in seconds, a phase over 2x marked ('' when no pair ran)."""
    from studio.core.config.files.presets import get_preset

    done = [r for r in rows if r.phases and r.status == "completed"]
    group = {r.preset: (model_of(r.preset), str(get_preset(r.preset).method)) for r in done}
    reference: dict[tuple[str, str], Any] = {}
    for r in done:
        best = reference.get(group[r.preset])
        if r.promise_gb <= REFERENCE_GB and (best is None or r.promise_gb > best.promise_gb):
            reference[group[r.preset]] = r
    lines: list[str] = []
    for row in done:
        other = reference.get(group[row.preset])
        if other is None or row.promise_gb >= other.promise_gb:
            continue
        for phase, seconds in row.phases.items():
            base = other.phases.get(phase)
            ratio = seconds / base if base else None
            over = ratio is not None and ratio > LIMIT and seconds - (base or 0) > 1.0  # not a second's noise
            lines.append(f"| {row.preset} | {other.preset} | {phase} | {seconds:.1f} | "
                         f"{'—' if base is None else f'{base:.1f}'} | "
                         f"{'—' if ratio is None else f'{ratio:.1f}x'}{' **over 2x**' if over else ''} |")
    if not lines:
        return ""
    return "\n".join(["", "Phases of each low-VRAM preset against its model's larger preset (seconds):", "",
                      "| preset | against | phase | s | its s | ratio |", "|---|---|---|---|---|---|",
                      *lines]) + "\n"
