"""Print the system-RAM estimate of every shipped preset as a Markdown table (for docs/benchmarks.md).

Run: `python benchmarks/ram_estimate_table.py [--images N]`. Each preset is estimated as a person runs it
(`preset_estimate.preset_config`: a placeholder project with sample images on) on a card of its promised
size, with a dataset of N images (default 100) for the caches. Pure Python, no torch: well under a second.
"""

from __future__ import annotations

import argparse

from studio.core.config.files.presets import list_presets
from studio.core.estimate.plans.preset_estimate import preset_config, promised_gpu
from studio.core.estimate.ram.ram_estimate import PHASE_WORDS, estimate_ram

PHASES = ("loading", "converting", "caching", "training")


def table(images: int) -> str:
    head = ["Preset", "Peak RAM", "Peak", *(PHASE_WORDS[p].removeprefix("while ") for p in PHASES), "Largest part"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for preset in sorted(list_presets(), key=lambda p: p.id):
        est = estimate_ram(preset_config(preset), promised_gpu(preset), images=images)
        largest = max((p for p in est.parts if p.key != "baseline"), key=lambda p: p.mb, default=None)
        cells = [f"`{preset.id}`", f"{est.total_gb:.1f} GB", est.phase,
                 *(f"{est.phases[p] / 1024:.1f}" if p in est.phases else "–" for p in PHASES),
                 f"{largest.label} {largest.mb / 1024:.1f} GB" if largest else "–"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100, help="dataset size for the caches (default 100)")
    print(table(parser.parse_args().images))


if __name__ == "__main__":
    main()
