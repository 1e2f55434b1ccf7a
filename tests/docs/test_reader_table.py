"""docs/index.md's "Which file to load where" table names, for each family and adapter, the programs the
kohya-format file is for: the same programs the run's screen and history name (core/families/readers.py).
A DoRA file read by a program that drops its `dora_scale` (diffusers' kohya readers, musubi-tuner) is applied
there as a plain LoRA: not the trained result, so not listed for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.families import FAMILIES
from studio.core.families.readers import readers_of

INDEX = Path(__file__).resolve().parents[2] / "docs" / "index.md"
PROGRAMS = ("A1111/Forge", "ComfyUI", "Forge", "sd-scripts", "musubi-tuner", "diffusers")
# adapter in the table -> readers_of's network and dora
ADAPTERS = {"LoRA": ("lora", False), "DoRA": ("lora", True), "LoHa": ("loha", False), "LoKr": ("lokr", False)}
# The transformer families whose files are written in their readers' own layouts.
FAMILY_ROWS = ("FLUX.2 [klein]", "Z-Image", "Qwen-Image")


def _programs(text: str) -> set[str]:
    """The programs a cell names before any parenthesis (which says why, not where)."""
    text = text.split("(", 1)[0]
    found = set()
    for program in PROGRAMS:
        if program in text:
            found.add(program)
            text = text.replace(program, "")
    return found


def _rows() -> list[tuple[str, str, str]]:
    lines = INDEX.read_text(encoding="utf-8").split("**Which file to load where.**", 1)[1].splitlines()
    cells = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines if line.startswith("| ")]
    return [(row[0], row[1], row[3]) for row in cells[1:] if len(row) == 4 and row[0] in FAMILY_ROWS]


@pytest.mark.parametrize("title", FAMILY_ROWS)
def test_the_docs_table_names_the_readers_the_studio_names(title: str) -> None:
    spec = next(spec for spec in FAMILIES if spec.title == title)
    rows = [row for row in _rows() if row[0] == title]
    assert rows, title
    said = []
    for _family, adapters, kohya in rows:
        for adapter in (a.strip() for a in adapters.split(",")):
            network, dora = ADAPTERS[adapter]
            studio = _programs(readers_of("run/output/mine.safetensors", spec.name, network=network, dora=dora))
            said.append((adapter, _programs(kohya), studio))
    assert [(adapter, docs) for adapter, docs, studio in said if docs != studio] == [], said
    assert {adapter for adapter, _docs, _studio in said} >= {"LoRA", "DoRA", "LoKr"}
