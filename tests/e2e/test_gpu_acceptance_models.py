"""benchmarks/gpu_acceptance.py's models and its NVML sampler, without a GPU.

The full-size models fill the GPU machine's 64 GB disk fast, so they are written one at a time, in the order
the presets need them, each when the disk holds it, and removed when no preset left needs it; a model the
disk can never hold skips its presets with the reason. A stand-in writer and a stand-in trainer replace the
real ones, and `--disk-gb` gives the free disk the script plans with. An NVML error while a run is sampled
loses that sample, not the run's peak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from fixtures.scripts import load_script

# Notes whether another writer was at work when it started, and which model folders were there.
WRITER = """
import os, sys, time
from pathlib import Path
key, folder = sys.argv[-2], Path(sys.argv[-1])
log = Path(os.environ["WRITES_LOG"])
lock = log.with_name("writing")
try:
    os.close(os.open(lock, os.O_CREAT | os.O_EXCL))
    alone = True
except FileExistsError:
    alone = False
folders = " ".join(sorted(p.name for p in folder.parent.iterdir()))
with log.open("a") as f:
    f.write(f"{key} {'alone' if alone else 'beside-another'} {folders}\\n")
time.sleep(0.5)
(folder / "model").mkdir()
(folder / f"{key}.path").write_text(str(folder / "model"))
if alone:
    lock.unlink()
"""

# Notes which model folders were there when its run started.
TRAINER = """
import os, sys
from pathlib import Path
config = Path(sys.argv[-1])
models = config.parent.parent / "models"
with open(os.environ["RUNS_LOG"], "a") as f:
    f.write(f"{config.parent.name} {' '.join(sorted(p.name for p in models.iterdir()))}\\n")
"""


def _script() -> ModuleType:
    return load_script("benchmarks/gpu_acceptance.py")


def _acceptance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk_gb: float, presets: list[str],
                extra: list[str], script: ModuleType | None = None) -> tuple[dict[str, str], list[str], list[str]]:
    """(each preset's status, the writers' notes, the runs' notes) of a dry run with the stand-ins (in `script`,
    the loaded acceptance script, when a test changes part of it)."""
    (tmp_path / "writer.py").write_text(WRITER)
    (tmp_path / "trainer.py").write_text(TRAINER)
    writes, runs = tmp_path / "writes.log", tmp_path / "runs.log"
    monkeypatch.setenv("WRITES_LOG", str(writes))
    monkeypatch.setenv("RUNS_LOG", str(runs))
    out = tmp_path / "out"
    (script or _script()).main(["--dry-run", "--budget-s", "60", "--only", *presets, "--disk-gb", str(disk_gb), *extra,
                    "--out", str(out), "--writer", f"{sys.executable} {tmp_path / 'writer.py'}",
                    "--trainer", f"{sys.executable} {tmp_path / 'trainer.py'}"])
    rows = json.loads((out / "gpu_acceptance.json").read_text())["rows"]
    return {r["preset"]: r["status"] for r in rows}, _lines(writes), _lines(runs)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def test_models_are_written_one_at_a_time_as_the_disk_holds_them(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """10 GB free: SD1.5's model (2 GB) fits, SDXL's (6.5 GB, 8.8 GB with the margin) only once SD1.5's is
    removed after its run, and Z-Image's (19 GB) never. The given SD3 model is used and left as it was."""
    given = tmp_path / "sd3-given"
    given.mkdir()
    (given / "weights").write_text("mine")
    status, writes, runs = _acceptance(
        tmp_path, monkeypatch, 10, ["sd15-lora-6gb", "sdxl-lora-6gb", "zimage-lora-8gb", "sd3-lora-12gb"],
        ["--model", f"sd3={given}"])
    assert writes == ["sd15 alone sd15", "sdxl alone sdxl"]  # in the presets' order, the second after the first
    assert status == {"sd15-lora-6gb": "exit 0", "sdxl-lora-6gb": "exit 0", "sd3-lora-12gb": "exit 0",
                      "zimage-lora-8gb": "skipped: its model needs about 22 GB of disk, 10 GB free"}
    assert "sdxl-lora-6gb sdxl" in runs  # SD1.5's model was gone when SDXL's run started
    assert (given / "weights").read_text() == "mine" and [p.name for p in given.iterdir()] == ["weights"]


def test_a_model_of_a_family_of_several_sizes_can_be_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FLUX.2 [klein]'s presets train the 4B or the 9B: a model written in an earlier call is given by its size's
    name and used, not written again."""
    given = tmp_path / "klein-4b-given"
    given.mkdir()
    status, writes, runs = _acceptance(tmp_path, monkeypatch, 1000, ["flux2-klein-4b-lora-6gb"],
                                       ["--model", f"flux2-klein-4b={given}"])
    assert writes == [] and status == {"flux2-klein-4b-lora-6gb": "exit 0"} and len(runs) == 1
    with pytest.raises(SystemExit):
        _script().main(["--dry-run", "--out", str(tmp_path / "o"), "--model", f"flux2-klein={given}"])


def test_a_model_is_removed_after_its_last_run_even_with_room_to_spare(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Plenty of disk: SDXL's model is written while SD1.5's presets run; SD1.5's stays for its second preset
    and is gone when SDXL's run starts (one run at a time in a dry run)."""
    status, writes, runs = _acceptance(tmp_path, monkeypatch, 1000, ["sd15-lora-6gb", "sd15-lora", "sdxl-lora-8gb"],
                                       [])
    assert [line.split()[:2] for line in writes] == [["sd15", "alone"], ["sdxl", "alone"]]
    assert set(status.values()) == {"exit 0"}
    assert [line.split()[:2] for line in runs[:2]] == [["sd15-lora-6gb", "sd15"], ["sd15-lora", "sd15"]]
    assert runs[2:] == ["sdxl-lora-8gb sdxl"]


def _fake_nvml(failures: int, calls: list[int]) -> ModuleType:
    """An NVML whose memory reading fails the first `failures` times; this process uses 3 GiB of the card."""
    nvml = ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def memory_info(_handle: Any) -> Any:
        calls.append(1)
        if len(calls) <= failures:
            raise NVMLError("Unknown Error")
        return SimpleNamespace(used=5 * 2**30)

    nvml.NVMLError = NVMLError  # type: ignore[attr-defined]
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: 1  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda index: index  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = memory_info  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetComputeRunningProcesses = (  # type: ignore[attr-defined]
        lambda _handle: [SimpleNamespace(pid=os.getpid(), usedGpuMemory=3 * 2**30)])
    return nvml


def test_an_nvml_error_loses_one_sample_not_the_runs_peak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _script()
    calls: list[int] = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(2, calls))
    sampler = module.TreePeak(os.getpid(), gpu=True)
    sampler.start()
    deadline = time.monotonic() + 60
    while sampler.is_alive() and len(calls) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sampler.is_alive()  # the errors did not end the sampling
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    job = module.Job(module.Row("sd15-lora-6gb", "sd15", 6), tmp_path, tmp_path / "config.toml", 1, process,
                     sampler, time.monotonic(), (tmp_path / "cli.log").open("wb"))
    row = module.finish_job(job, False, dry_run=False, alone=True)
    assert sampler.peak_mb == 3 * 1024 and row.measured_gb == 3.0
    assert row.message == "NVML error: Unknown Error (the sampling went on)"  # noted once


def test_the_disk_a_model_takes_follows_its_parameter_counts() -> None:
    module = _script()
    sizes = {key: module.written_gb(key) for key in ("sd15", "sdxl", "sd3", "flux2-klein-4b", "zimage",
                                                     "flux2-klein-9b", "qwen-image")}
    # What the GPU notes say the written models take (in GiB): SD3 without its T5.
    expected = {"sd15": 2.0, "sdxl": 6.5, "sd3": 5.5, "flux2-klein-4b": 14.9, "zimage": 19.1, "flux2-klein-9b": 32.3,
                "qwen-image": 53.7}
    assert {key: round(gb, 1) for key, gb in sizes.items()} == expected
    assert sum(sizes.values()) > 64  # never all at once on the GPU machine's 64 GB disk


def test_a_dry_run_swaps_one_of_the_tiny_models_few_blocks(tmp_path: Path) -> None:
    """A low-VRAM preset swaps 23 of [klein] 4B's 25 blocks; the tiny model has three, so its dry run failed at
    step 0. The dry run swaps one; the estimate still reads the preset as it is."""
    from studio.core.config.files.presets import get_preset

    run, full = _script().run_config(get_preset("flux2-klein-4b-lora-6gb"), tmp_path / "model", tmp_path, 4, True)
    assert (run.model.blocks_to_swap, full.model.blocks_to_swap) == (1, 23)
    run, full = _script().run_config(get_preset("sd15-lora-6gb"), tmp_path / "model", tmp_path, 4, True)
    assert run.model.blocks_to_swap == full.model.blocks_to_swap == 0


def test_a_preset_that_cannot_start_costs_its_row_not_the_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose set-up raises (its config refused, its folder unwritable) is noted in its row and the next
    preset runs: on the GPU machine the call is the session's one."""
    script = _script()
    start_job = script.start_job

    def refused(preset: Any, *args: Any, **kwargs: Any) -> Any:
        if preset.id == "sd15-lora-6gb":
            raise ValueError("model.base: no such file\nsecond line")
        return start_job(preset, *args, **kwargs)

    monkeypatch.setattr(script, "start_job", refused)
    rows, _writes, runs = _acceptance(tmp_path, monkeypatch, 1000, ["sd15-lora-6gb", "sdxl-lora-6gb"], [], script)
    assert rows["sd15-lora-6gb"] == "failed to start: ValueError: model.base: no such file"
    assert runs[0].startswith("sdxl-lora-6gb")  # the next preset ran
