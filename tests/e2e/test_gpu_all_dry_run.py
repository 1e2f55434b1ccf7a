"""benchmarks/gpu_all.sh as one device call runs it, on the CPU (DRY_RUN=1): acceptance then speed,
ended by its deadline, at most 8 files in the output folder (what one call brings back)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="a bash script with GNU timeout, as on the GPU machine")
def test_the_whole_call_ends_by_its_deadline_with_at_most_8_files(tiny_sd15: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               ACCEPT_ARGS=f"--only sd15-lora-6gb sdxl-dreambooth-8x80gb --steps 2 --model sd15={tiny_sd15}",
               SPEED_ARGS="--only sd15 --paths bare")
    began = time.monotonic()
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_all.sh"), str(out), "200"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    took = time.monotonic() - began
    assert took < 200 + 25, done.stdout[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all(p.is_file() for p in out.iterdir())
    assert {"env.txt", "log.txt", "gpu_acceptance.json", "gpu_acceptance.md", "table.md", "results.json"} <= set(files)
    log = (out / "log.txt").read_text()
    assert re.search(r"acceptance exit \d+", log) and "speed: " in log
    rows = json.loads((out / "gpu_acceptance.json").read_text())["rows"]
    assert rows[0]["preset"] == "sd15-lora-6gb" and rows[0]["started_s"] is not None, rows[0]
    assert not [r for r in rows if r["status"].startswith("writing the model failed")]
    assert rows[-1]["status"].startswith("skipped: needs 8 GPUs")
    speed = json.loads((out / "results.json").read_text())
    assert speed and speed[0]["s_per_step"]  # the first speed case ran
    assert "| preset | promise | estimate |" in done.stdout  # the tables end the output
    assert (tmp_path / "out").resolve().parent == tmp_path.resolve()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="a bash script with GNU timeout, as on the GPU machine")
def test_a_share_of_0_gives_the_whole_call_to_the_speed_benchmark_of_the_transformer_families(tmp_path: Path) -> None:
    """ACCEPT_SHARE=0: the speed benchmark alone. FLUX.2 [klein] and Z-Image take the same code paths as on the
    GPU: the bare step built from the family's counted inputs, the studio's trainer, and one step under the
    profiler (its dispatched-op count in the table)."""
    out = tmp_path / "out"
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               ACCEPT_SHARE="0", SPEED_ARGS=f"--only flux2-klein zimage --paths bare studio --steps 1 --warmup 1 "
                                           f"--work {tmp_path / 'work'}")
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_all.sh"), str(out), "240"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=400)
    log = (out / "log.txt").read_text()
    assert "acceptance: not run (ACCEPT_SHARE=0)" in log and "speed exit 0" in log, log[-2000:] + done.stderr[-2000:]
    assert not (out / "gpu_acceptance.json").exists()
    results = json.loads((out / "results.json").read_text())
    assert [(r["case"]["family"], r["case"]["batch"], r["case"]["path"]) for r in results] == [
        ("flux2-klein", 2, "bare"), ("flux2-klein", 2, "studio"), ("zimage", 2, "bare"), ("zimage", 2, "studio"),
        ("flux2-klein", 1, "bare"), ("flux2-klein", 1, "studio"), ("zimage", 1, "bare"), ("zimage", 1, "studio")]
    for r in results:
        assert not r["note"] and r["s_per_step"] > 0
        assert r["ops_per_step"] > 500 and r["kernels_per_step"] is None  # no kernels on the CPU
    table = (out / "table.md").read_text()
    studio_row = next(line for line in table.splitlines() if line.startswith("| zimage | 64 | 2 | studio |"))
    assert f"| {results[3]['ops_per_step']} | - |" in studio_row


# Stands in for the interpreter: notes each command line it is given.
PYTHON_STAND_IN = '#!/bin/sh\necho "$*" >> "$ARGS_LOG"\n'


def _arguments(tmp_path: Path, script: str, **env: str) -> list[str]:
    """The arguments gpu_all.sh gives `script` (gpu_acceptance.py or gpu_train_speed.py) on the GPU machine."""
    python, log = tmp_path / "python", tmp_path / "args.log"
    python.write_text(PYTHON_STAND_IN)
    python.chmod(0o755)
    log.unlink(missing_ok=True)
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_all.sh"), str(tmp_path / "out"), "520"], cwd=ROOT,
                   env=dict(os.environ, PYTHON=str(python), ARGS_LOG=str(log), **env), check=True, timeout=60,
                   capture_output=True)
    words = next(line for line in log.read_text().splitlines() if script in line).split()
    return words[words.index(str(ROOT / "benchmarks" / script)) + 1:]


@pytest.mark.skipif(sys.platform != "linux", reason="a bash script with GNU timeout, as on the GPU machine")
def test_the_acceptance_proves_the_low_vram_promises_under_their_cap_by_default(tmp_path: Path) -> None:
    """The acceptance's default: `--cap`, and the presets the call's share can finish (the 6 and 8 GB ones of
    [klein] 4B, SD1.5, SDXL and Z-Image, and [klein] 4B's 24 GB one for the phase comparison). ACCEPT_ARGS
    replaces it."""
    words = _arguments(tmp_path, "gpu_acceptance.py")
    assert words[:2] == ["--cap", "--only"]
    chosen = words[2:words.index("--out")]
    assert sorted(chosen) == ["flux2-klein-4b-lora-24gb", "flux2-klein-4b-lora-6gb", "flux2-klein-4b-lora-8gb",
                              "sd15-lora-6gb", "sdxl-lora-6gb", "zimage-lora-8gb"]
    assert all((ROOT / "presets" / f"{preset}.toml").is_file() for preset in chosen)
    given = _arguments(tmp_path, "gpu_acceptance.py", ACCEPT_ARGS="--only sd15-lora-6gb")
    assert given[:given.index("--out")] == ["--only", "sd15-lora-6gb"]
    speed = _arguments(tmp_path, "gpu_train_speed.py")
    assert speed[speed.index("--write-timeout-s") + 1] == "120"  # a model's write has a limit of its own
