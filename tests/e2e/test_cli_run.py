"""A new user's first run from the terminal: demo data, tiny model, `studio-train run`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from studio.core.events import RunFinished, read_events

CONFIG = """\
schema_version = 1
[model]
family = "sd15"
base = "models/tiny-sd15"
[method]
kind = "lora"
rank = 4
[dataset]
resolution = 64
buckets = false
[[dataset.concepts]]
path = "data/shapes"
[training]
batch_size = 2
max_steps = 4
seed = 1
[output]
dir = "runs"
name = "demo"
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "studio.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_studio_train_run_prints_where_the_lora_is(tmp_path: Path) -> None:
    made = _cli("demo-data", "data/shapes", "--count", "4", "--size", "64", cwd=tmp_path)
    assert made.returncode == 0 and "4 images" in made.stdout
    built = _cli("tiny", "sd15", "models/tiny-sd15", cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    (tmp_path / "studio.toml").write_text(CONFIG, encoding="utf-8")

    result = _cli("run", "studio.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    lora = run_dir / "output" / "pytorch_lora_weights.safetensors"
    assert f"written: {lora}" in result.stdout
    assert lora.is_file() and (run_dir / "output" / "demo.safetensors").is_file()
    console = (run_dir / "console.log").read_text(encoding="utf-8")
    assert "step 4: loss" in console and "run completed at step 4" in console
    assert (run_dir / "command.txt").read_text().strip().endswith(f"{run_dir / 'config.toml'}")
    finished = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, RunFinished)]
    assert finished and finished[-1].status == "completed"


@pytest.mark.slow
def test_studio_train_run_with_a_bad_config_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(CONFIG.replace("rank = 4", "rank = 0"), encoding="utf-8")
    result = _cli("run", "bad.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "method.rank" in result.stderr and "at least 1" in result.stderr
    assert not (tmp_path / "runs").exists()
