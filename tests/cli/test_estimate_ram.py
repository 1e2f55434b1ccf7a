"""`studio-train estimate` prints the system RAM beside the VRAM: the figure against the machine's, its parts,
and what to change when it does not fit; --json carries the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.cli import main as cli
from studio.core.config.files.presets import get_preset
from studio.core.estimate.plans.preset_estimate import preset_config
from studio.core.estimate.ram.ram_estimate import estimate_ram
from studio.core.hardware.machine.probe import find_profile, load_hardware


def _ram_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RAM: "))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
    return lines[start:end + 1]


def test_the_ram_line_shows_the_figure_of_the_machines_memory_and_its_parts(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["estimate", "--preset", "zimage-lora-12gb", "--hardware", "rtx3060-12gb"]) == 0
    lines = _ram_lines(capsys.readouterr().out)
    expected = estimate_ram(preset_config(get_preset("zimage-lora-12gb")), load_hardware("rtx3060-12gb").gpus[0])
    assert lines[0] == f"RAM: {expected.total_gb:.1f} GB of 32 GB (peak while the model loads)" \
        == "RAM: 14.3 GB of 32 GB (peak while the model loads)"
    assert lines[1].split() == ["Python,", "torch", "and", "libraries", "2.50", "GB", "interpreter,", "torch",
                                "with", "CUDA,", "diffusers,", "transformers", "(benchmarks/ram_baseline.py)"]
    assert any(line.strip().startswith("Largest model file being read        11.46 GB  ZImageTransformer2DModel")
               for line in lines)
    assert "  (other phases: while training 10.1 GB, while the caches fill 8.2 GB, while the denoiser is turned to " \
           "fp8 8.5 GB)" in lines
    assert not any("NOT fit in RAM" in line for line in lines)


def test_json_carries_the_ram_estimate_and_a_refusal_on_a_small_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["estimate", "--preset", "zimage-lora-12gb", "--hardware", "rtx3060-12gb", "--json"]) == 0
    ram = json.loads(capsys.readouterr().out)["ram"]
    assert ram["text"] == "RAM: 14.3 GB of 32 GB (peak while the model loads)"
    assert ram["machine_mb"] == 32768 and ram["fit"] == "fits" and ram["message"] is None
    assert ram["estimate"]["phase"] == "loading"
    assert [p["key"] for p in ram["estimate"]["parts"]] == ["baseline", "model_load", "file_read"]
    assert sum(p["mb"] for p in ram["estimate"]["parts"]) == pytest.approx(ram["estimate"]["total_mb"])

    small = json.loads(find_profile("rtx3060-12gb").read_text(encoding="utf-8")) | {"ram_mb": 8192}
    (tmp_path / "small.json").write_text(json.dumps(small), encoding="utf-8")
    assert cli(["estimate", "--preset", "zimage-lora-12gb", "--hardware", str(tmp_path / "small.json"), "--json"]) == 0
    ram = json.loads(capsys.readouterr().out)["ram"]
    assert ram["text"] == "RAM: 14.3 GB of 8 GB (peak while the model loads)" and ram["fit"] == "does_not_fit"
    assert cli(["estimate", "--preset", "zimage-lora-12gb", "--hardware", str(tmp_path / "small.json")]) == 0
    out = capsys.readouterr().out
    assert f"Does NOT fit in RAM: {ram['message']}" in out.splitlines()
    assert ram["message"].endswith("this model needs 14.3 GB of RAM; this machine has 8 GB: add memory, use a "
                                   "machine with more, or choose a smaller model.")
