"""Before a run, its system memory against the machine's: a run far over it is refused with the fix named,
one near it is a warning a person may confirm (headless: printed and started)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from studio.cli import EXIT_INVALID, main
from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import save_config
from studio.core.config.schema import TrainConfig
from studio.core.estimate.ram.ram_estimate import estimate_ram
from studio.core.hardware.machine.probe import find_profile, load_profile
from studio.core.project import preflight as preflight_module
from studio.core.project.folder import create_project
from studio.core.project.preflight import preflight, preflight_headless


def _little_ram_profile(folder: Path, ram_gb: int) -> Path:
    """The RTX 3060 desktop with only `ram_gb` of system memory."""
    data = json.loads(find_profile("rtx3060-12gb").read_text(encoding="utf-8"))
    data.update(description=f"RTX 3060 12 GB with {ram_gb} GB of RAM", ram_mb=ram_gb * 1024,
                ram_available_mb=ram_gb * 800)
    path = folder / f"rtx3060-{ram_gb}gb-ram.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _zimage_project(tmp_path: Path, **training: Any) -> tuple[TrainConfig, Path]:
    root = tmp_path / "project"
    (root / "images").mkdir(parents=True)
    for i in range(3):
        Image.new("RGB", (16, 16)).save(root / "images" / f"{i}.png")
    config = create_project(root).load_config()
    config.model.family, config.model.base = "zimage", "Tongyi-MAI/Z-Image"  # type: ignore[assignment]
    config.model.dtype = "bf16"
    config.dataset.concepts[0].path = "images"
    config.training.mixed_precision = "bf16"
    for key, value in training.items():
        setattr(config.training, key, value)
    return config, root


@pytest.fixture(autouse=True)
def _hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))  # the model is "not downloaded", always


def test_a_zimage_run_on_8_gb_of_ram_is_refused_with_what_it_needs(tmp_path: Path) -> None:
    config, root = _zimage_project(tmp_path)
    machine = load_profile(_little_ram_profile(tmp_path, 8))
    resolved = resolve_paths(config, root)
    (problem,) = [p for p in preflight(resolved, machine.gpus[0], check_torch=False, ram_mb=machine.ram_mb)
                  if p.check.startswith("ram")]
    need = estimate_ram(resolved, machine.gpus[0])
    assert problem.check == "ram" and not problem.can_confirm  # no "start anyway": the system would end it
    assert need.phase == "loading" and round(need.total_gb, 1) == 14.3
    assert problem.message == (
        "The run needs about 14.3 GB of system RAM (peak while the model loads: Largest model file being read "
        "11.5 GB, Model loading (converted copies) 0.3 GB), 178% of this machine's 8 GB, more than it can hold: "
        "this model needs 14.3 GB of RAM; this machine has 8 GB: add memory, use a machine with more, or choose "
        "a smaller model.")
    # The same run on the desktop's usual 32 GB passes the RAM check.
    assert not [p for p in preflight(resolved, machine.gpus[0], check_torch=False, ram_mb=32768)
                if p.check.startswith("ram")]


def test_workers_that_tip_it_over_are_named_as_the_fix(tmp_path: Path) -> None:
    config, root = _zimage_project(tmp_path, dataloader_workers=16, cache_text_embeddings=True)
    resolved = resolve_paths(config, root)
    gpu = load_profile("rtx4090-24gb").gpus[0]
    (problem,) = [p for p in preflight(resolved, gpu, check_torch=False, ram_mb=20 * 1024)
                  if p.check.startswith("ram")]
    assert problem.check == "ram"
    assert "(peak while training: Data-loading workers 9.5 GB, Text encoders (parked) 7.5 GB)" in problem.message
    assert problem.message.endswith(": lower training.dataloader_workers (to 0: batches are read by the training "
                                    "process itself) → 14.3 GB.")


def test_near_the_machines_ram_is_a_warning_headless_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, root = _zimage_project(tmp_path)
    monkeypatch.setattr(preflight_module, "check_torch_cuda", lambda _python: None)  # this machine has no CUDA
    monkeypatch.setenv("STUDIO_HARDWARE", str(_little_ram_profile(tmp_path, 16)))  # 14.3 GB is 89% of 16 GB
    errors, warnings = preflight_headless(resolve_paths(config, root))
    assert [p.check for p in errors] == ["model"]  # the model is not downloaded: no one is there to confirm
    (warning,) = [p for p in warnings if p.check == "ram_tight"]
    assert warning.can_confirm
    assert warning.message.startswith("The run needs about 14.3 GB of system RAM (peak while the model loads: ")
    assert "89% of this machine's 16 GB: other programs may push it into swap; to lower it, this model needs " \
           "14.3 GB of RAM; this machine has 16 GB." in warning.message


def test_studio_train_run_refuses_a_run_over_the_machines_ram(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    started: list[Any] = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setenv("STUDIO_HARDWARE", str(_little_ram_profile(tmp_path, 8)))
    monkeypatch.setattr(preflight_module, "check_torch_cuda", lambda _python: None)  # this machine has no CUDA
    config, root = _zimage_project(tmp_path)
    save_config(config, root / "studio.toml")
    assert main(["run", str(root / "studio.toml")]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "error: The run needs about 14.3 GB of system RAM (peak while the model loads" in err
    assert "this machine has 8 GB: add memory, use a machine with more, or choose a smaller model." in err
    assert started == []
