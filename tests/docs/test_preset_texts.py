"""What a shipped preset's card says (title, description, trade-offs) is what the preset does: the VRAM in
its title is its promise, the sizes, ranks and swapped blocks it names are its settings, and a memory figure
"with samples" is the estimate the same card shows beside it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from studio.core.config.files.presets import list_presets
from studio.core.estimate.plans.preset_estimate import estimate_preset, preset_config

PRESETS = list_presets(include_user=False)


def _tolerance(figure: str) -> float:
    """Half a unit of the figure's last digit ("17" 0.5, "22.8" 0.05), and a rounding's hair."""
    decimals = len(figure.split(".")[1]) if "." in figure else 0
    return 0.5 * 10 ** -decimals + 0.005


@pytest.mark.parametrize("preset", PRESETS, ids=[p.id for p in PRESETS])
def test_the_title_says_the_promise(preset: Any) -> None:
    found = re.search(r"\((?:(\d+) × )?(\d+) GB", preset.title)
    if found is not None:  # "SD1.5 LoRA" names none
        assert (int(found.group(1) or 1), float(found.group(2))) == (preset.gpus, preset.min_vram_gb)
    for card in re.findall(r"\b(?:in|on an?) (\d+) GB\b", preset.description):  # "at 1024 px in 6 GB"
        assert float(card) == preset.min_vram_gb


@pytest.mark.parametrize("preset", PRESETS, ids=[p.id for p in PRESETS])
def test_the_settings_the_texts_name_are_the_presets(preset: Any) -> None:
    config = preset_config(preset)
    description, tradeoffs = preset.description, preset.info.tradeoffs
    named: list[tuple[str, int, int]] = []
    if (found := re.search(r"\bat (\d+) px", description)) is not None:
        named.append(("resolution", int(found.group(1)), config.dataset.resolution))
    if (found := re.search(r"\brank[ -](\d+)", description)) is not None:
        named.append(("rank", int(found.group(1)), config.method.rank))
    for text in (description, tradeoffs):
        for size in re.findall(r"samples at (\d+) px", text):
            named.append(("sample size", int(size), config.sampling.size or config.dataset.resolution))
        for blocks in re.findall(r"(?:weights of (?:its last )?|the )(\d+) (?:of (?:its )?\d+ blocks|swapped blocks)", text):
            named.append(("blocks swapped", int(blocks), config.model.blocks_to_swap))
    assert [(what, said) for what, said, has in named if said != has] == []


@pytest.mark.parametrize("preset", PRESETS, ids=[p.id for p in PRESETS])
def test_a_figure_with_samples_is_the_estimate(preset: Any) -> None:
    # The card shows the estimate on the promised card; a trade-off that names another figure contradicts it.
    figures = re.findall(r"(?:estimated|about) (\d+(?:\.\d+)?) GB (?:of VRAM )?with samples",
                         preset.info.tradeoffs, re.IGNORECASE)
    if not figures:
        return
    estimated = estimate_preset(preset).estimate.total_gb
    assert [figure for figure in figures if abs(float(figure) - estimated) > _tolerance(figure)] == [], \
        f"{preset.id}: estimated {estimated:.2f} GB with samples"
