"""benchmarks/gpu_acceptance.py within one short GPU call: lowest promise first, no run started after
--budget-s, its table written after every run, presets needing more GPUs skipped, and no process left
behind when the script is ended. A stand-in trainer replaces `studio-train run` (the dry run of a real
preset is tests/e2e/test_gpu_acceptance_dry_run.py)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_acceptance.py"
PRESETS = ["sd3-lora-12gb", "sdxl-dreambooth-2x24gb", "sd15-dreambooth-12gb", "sdxl-lora-8gb", "sd15-lora",
           "sd15-lora-6gb"]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = module
    spec.loader.exec_module(module)
    return module


class Clock:
    """The script's clock: each run started takes 20 s of it, each wait of the loop its own length."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, 0.05))
        self.now += seconds

    @staticmethod
    def strftime(fmt: str) -> str:
        return time.strftime(fmt)


def _models(tmp_path: Path) -> list[str]:
    args = []
    for family in ("sd15", "sdxl", "sd3"):
        (tmp_path / family).mkdir()
        args += ["--model", f"{family}={tmp_path / family}"]
    return args


def test_the_budget_stops_new_runs_and_the_table_follows_every_run(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    module = _script()
    clock = Clock()
    monkeypatch.setattr(module, "time", clock)
    real_start, real_write = module.start_job, module.write_results
    writes: list[list[tuple[str, str]]] = []

    def start_job(*args: Any, **kwargs: Any) -> Any:
        job = real_start(*args, **kwargs)
        clock.now += 20
        return job

    def write_results(out: Path, rows: list[Any], meta: dict[str, Any]) -> None:
        real_write(out, rows, meta)
        writes.append([(r.preset, r.status) for r in rows])

    monkeypatch.setattr(module, "start_job", start_job)
    monkeypatch.setattr(module, "write_results", write_results)
    out = tmp_path / "out"
    quick = tmp_path / "quick.py"
    quick.write_text("import sys\nsys.exit(0)\n")
    code = module.main(["--dry-run", "--budget-s", "60", "--only", *PRESETS, *_models(tmp_path), "--out", str(out),
                        "--trainer", f"{sys.executable} {quick}"])
    data = json.loads((out / "gpu_acceptance.json").read_text())
    order = [r["preset"] for r in data["rows"]]
    assert order == ["sd15-lora-6gb", "sd15-lora", "sdxl-lora-8gb", "sd15-dreambooth-12gb", "sd3-lora-12gb",
                     "sdxl-dreambooth-2x24gb"]  # lowest promise first
    status = {r["preset"]: r["status"] for r in data["rows"]}
    assert [status[p] for p in order[:3]] == ["exit 0"] * 3  # started at 0, 20 and 40 s
    assert all(r["started_s"] <= 60 for r in data["rows"] if r["started_s"] is not None)
    assert status["sd15-dreambooth-12gb"] == status["sd3-lora-12gb"] == "skipped: out of time"
    assert status["sdxl-dreambooth-2x24gb"] == "skipped: needs 2 GPUs, this machine has 1"
    assert code == 1  # not every preset was measured
    # After each run ended, the table said so before the next run started.
    for done, following in itertools.pairwise(order[:3]):
        ended = next(i for i, w in enumerate(writes) if (done, "exit 0") in w)
        began = next(i for i, w in enumerate(writes) if (following, "running") in w)
        assert ended < began
    table = (out / "gpu_acceptance.md").read_text()
    assert "| sd15-lora-6gb | 6 GB |" in table and "skipped: out of time |" in table
    assert sorted(p.name for p in out.iterdir()) == ["gpu_acceptance.json", "gpu_acceptance.md"]


STAND_IN = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["PIDS_FILE"] + ".part", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.replace(os.environ["PIDS_FILE"] + ".part", os.environ["PIDS_FILE"])
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and SIGTERM as on the GPU machine")
def test_ending_the_script_ends_its_runs_and_their_children(tmp_path: Path) -> None:
    stand_in, pids = tmp_path / "trainer.py", tmp_path / "pids"
    stand_in.write_text(STAND_IN)
    out = tmp_path / "out"
    env = dict(os.environ, PIDS_FILE=str(pids), PYTHONPATH=str(ROOT))
    log = tmp_path / "script.log"
    with log.open("wb") as sink:
        script = subprocess.Popen([sys.executable, str(SCRIPT), "--dry-run", "--budget-s", "60", "--only",
                                   "sd15-lora-6gb", *_models(tmp_path), "--out", str(out), "--trainer",
                                   f"{sys.executable} {stand_in}"], cwd=ROOT, env=env, stdout=sink, stderr=sink)
    deadline = time.monotonic() + 120
    while not pids.is_file() and script.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids.is_file(), log.read_text()
    trainer, grandchild = (int(p) for p in pids.read_text().split())
    running = json.loads((out / "gpu_acceptance.json").read_text())["rows"]
    assert [r["status"] for r in running] == ["running"]  # written as the run started
    script.send_signal(signal.SIGTERM)
    assert script.wait(timeout=60) != 0
    deadline = time.monotonic() + 10
    while not (_gone(trainer) and _gone(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(trainer) and _gone(grandchild)


def test_a_script_run_inside_another_process_ends_only_the_children_it_started() -> None:
    """The tests call the scripts' main() in their own process: ending the script's children once ended the
    test worker's own helpers too (multiprocessing's resource tracker, which the next Dataset-page test then
    found dead, and failed on Python's warning)."""
    _script()  # puts benchmarks/ on the path, as the scripts do
    from process_tree import ending_children

    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    helper = subprocess.Popen(sleep)  # the caller's, started before the script
    try:
        with ending_children():
            started = subprocess.Popen(sleep)
            grandchild = subprocess.Popen([sys.executable, "-c", f"import subprocess; subprocess.run({sleep!r})"])
            deadline = time.monotonic() + 10
            while not psutil.Process(grandchild.pid).children() and time.monotonic() < deadline:
                time.sleep(0.05)
            inner = psutil.Process(grandchild.pid).children()
        assert started.wait(10) is not None and grandchild.wait(10) is not None
        assert inner and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in inner)
        assert helper.poll() is None  # still running
    finally:
        helper.kill()
        helper.wait()


SIDE_BY_SIDE = """
import sys, time
from pathlib import Path
config = Path(sys.argv[1])
preset, folder = config.parent.name, config.parent.parent
if preset == "sd15-lora-6gb":
    sys.exit(2)  # refused before it touched the GPU
if preset == "sdxl-lora-8gb":
    (folder / "third-started").touch()
    sys.exit(0)
deadline = time.monotonic() + 10
while not (folder / "third-started").exists():  # runs until the third preset starts beside it
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.05)
"""


class _NvmlNamesOurRuns:
    """The sampler of a GPU where NVML names each run's processes: none for a run that never touched the GPU
    (the first started), the others' memory on the card meanwhile."""

    started = 0

    def __init__(self, _pid: int, gpu: bool) -> None:
        assert gpu
        type(self).started += 1
        self.peak_mb = 0.0 if type(self).started == 1 else 3000.0
        self.device_peak_mb, self.error = 3000.0, ""

    def start(self) -> None:
        self.halt = threading.Event()

    def join(self) -> None:
        pass


def test_a_run_refused_before_it_touched_the_gpu_leaves_the_others_side_by_side(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that ended before its first step got no memory from NVML while the card held the others': it was
    taken for a sign that NVML names no process of ours, its row said "measure again with --jobs 1", and every
    later run waited for the one before (presets skipped for time). Two at a time here: the third preset starts
    when the refused one ends, beside the second, which runs until it does."""
    from studio.core.hardware.report import GPUInfo

    module = _script()
    monkeypatch.setattr(module, "TreePeak", _NvmlNamesOurRuns)
    stand_in = tmp_path / "stand_in.py"
    stand_in.write_text(SIDE_BY_SIDE)
    out = tmp_path / "out"
    args = module.parse_args(["--only", "sd15-lora-6gb", "sd15-lora", "sdxl-lora-8gb", *_models(tmp_path),
                              "--out", str(out), "--jobs", "2", "--budget-s", "60", "--run-timeout", "60"])
    args.trainer = [sys.executable, str(stand_in)]
    gpu = GPUInfo(index=0, name="test GPU", total_mb=143_771, free_mb=143_771)
    meta = {"date": "today", "gpu": gpu.name, "steps": args.steps, "every": 8, "jobs": 2, "dry_run": False,
            "context_mb": None}
    work = tmp_path / "work"
    (work / "models").mkdir(parents=True)
    rows = {r.preset: r.status for r in module.schedule(args, module.pick_presets(args.only), work, gpu, meta)}
    assert rows == {"sd15-lora-6gb": "exit 2", "sd15-lora": "exit 0", "sdxl-lora-8gb": "exit 0"}
