"""benchmarks/reader_conformance.py without the checkouts: its --dry-run, its table and its docs section
over a fixed row set (the readers themselves need ComfyUI and sd-scripts checkouts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

from fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    return load_script("benchmarks/reader_conformance.py")


def test_the_dry_run_prints_a_table_per_reader() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reader_conformance.py"), "--dry-run"],
                          capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr
    assert "**comfyui**" in done.stdout and "**sd-scripts**" in done.stdout
    assert "| sd15 | lora | bench.safetensors | 99 / 99 | 33 / 33 | 3.1e-07 |" in done.stdout


def test_rows_off_or_not_fully_loaded_are_flagged() -> None:
    script = _script()
    table = script.table(script.SAMPLE_ROWS)
    lines = [line for line in table.splitlines() if line.startswith("| sd")]
    assert len(lines) == len(script.SAMPLE_ROWS)
    assert "⚠" not in lines[0]
    assert "| 40 / 66 | 20 / 33 | 1 ⚠ |" in lines[1]
    assert "| — ⚠ | error: ModuleNotFoundError: library |" in lines[2]


def test_the_docs_section_names_the_checkouts_and_the_date() -> None:
    script = _script()
    text = script.section(script.SAMPLE_ROWS, {"comfyui": "abc123", "sd-scripts": "def456"}, "2026-12-04")
    assert text.startswith("## Outputs as the readers load them (2026-12-04)")
    assert "comfyui `abc123`; sd-scripts `def456`" in text


def test_the_cases_cover_every_family_and_adapter() -> None:
    from studio.core.families import FAMILIES

    script = _script()
    # Every declared family's files go through the readers (Qwen-Image's were never run through ComfyUI's code).
    assert set(script.FAMILIES) == {spec.name for spec in FAMILIES}
    assert script.adapters_of("sd15") == ["lora", "locon", "loha", "lokr", "dora"]
    assert script.adapters_of("zimage") == ["lora", "loha", "lokr", "dora"]
    case = {"family": "sd3", "adapter": "lora", "files": ["bench.safetensors", "pytorch_lora_weights.safetensors"]}
    assert script.reader_files("comfyui", case) == ["bench.safetensors", "pytorch_lora_weights.safetensors"]
    assert script.reader_files("sd-scripts", case) == []
    sdxl = {**case, "family": "sdxl", "adapter": "loha"}
    assert script.reader_files("lycoris", sdxl) == ["bench.safetensors"]
    assert script.reader_files("sd-scripts", sdxl) == []  # LoHa/LoKr: sd-scripts reads them through lycoris.kohya
    assert script.reader_files("sd-scripts", {**sdxl, "adapter": "dora"}) == ["bench.safetensors"]
