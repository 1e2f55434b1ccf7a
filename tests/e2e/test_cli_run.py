"""A new user's first run from the terminal: demo data, tiny model, `studio-train run`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fixtures.holds import hold_env
from fixtures.waits import scaled_s

from studio.core.runs.events import RunFinished, Step, read_events

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
                          capture_output=True, text=True, timeout=scaled_s(300))


@pytest.mark.slow
def test_studio_train_run_of_a_preset_prints_where_the_lora_is(tmp_path: Path) -> None:
    from studio.core.config.files.presets import apply_preset, get_preset
    from studio.core.config.files.toml_file import parse_toml, save_config, validate_data
    from tests.fixtures.training import scaled_to_tiny

    made = _cli("demo-data", "data/shapes", "--count", "4", "--size", "64", cwd=tmp_path)
    assert made.returncode == 0 and "4 images" in made.stdout
    built = _cli("tiny", "sd15", "models/tiny-sd15", cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    # The low-VRAM preset as shipped (caches, checkpointing, fp16, 8-bit Adam), scaled to the tiny model.
    project = validate_data(parse_toml(CONFIG, "studio.toml").unwrap())
    save_config(scaled_to_tiny(apply_preset(project, get_preset("sd15-lora-6gb"))), tmp_path / "studio.toml")

    result = _cli("run", "studio.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    lora = run_dir / "output" / "pytorch_lora_weights.safetensors"
    assert f"written: {lora}  (for diffusers (load_lora_weights))" in result.stdout
    # Each file says which programs load it (docs/index.md's "Which file to load where").
    assert f"written: {run_dir / 'output' / 'demo.safetensors'}  (for ComfyUI, A1111/Forge and sd-scripts)" \
        in result.stdout
    assert lora.is_file() and (run_dir / "output" / "demo.safetensors").is_file()
    assert sorted(p.name for p in (run_dir / "samples").glob("*.png")) == ["step-000002-0.png", "step-000004-0.png"]
    console = (run_dir / "console.log").read_text(encoding="utf-8")
    assert "step 4: loss" in console and "run completed at step 4" in console
    assert "this run uses AdamW" in console  # the CPU's stand-in for 8-bit Adam, said aloud
    assert (run_dir / "command.txt").read_text().strip().endswith(f"{run_dir / 'config.toml'}")
    finished = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, RunFinished)]
    assert finished and finished[-1].status == "completed"


@pytest.mark.slow
def test_the_readme_demo_commands_train_and_say_where_the_lora_is(tmp_path: Path) -> None:
    made = _cli("demo-project", "demo", cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    assert "studio-train run" in made.stdout
    result = _cli("run", "demo/studio.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = next((tmp_path / "demo" / "runs").iterdir())
    lora = run_dir / "output" / "pytorch_lora_weights.safetensors"
    assert f"written: {lora}" in result.stdout
    assert lora.is_file()
    steps = [e.step for e in read_events(run_dir / "events.jsonl") if isinstance(e, Step)]
    assert steps == list(range(1, 61))
    assert len(list((run_dir / "samples").rglob("*.png"))) >= 2


@pytest.mark.slow
def test_studio_train_run_with_a_bad_config_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(CONFIG.replace("rank = 4", "rank = 0"), encoding="utf-8")
    result = _cli("run", "bad.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "method.rank" in result.stderr and "at least 1" in result.stderr
    assert not (tmp_path / "runs").exists()


SIGTERM_CONFIG = """\
schema_version = 1
[model]
family = "sd15"
base = "{model}"
[method]
kind = "lora"
rank = 4
[dataset]
resolution = 64
buckets = false
[[dataset.concepts]]
path = "{data}"
[training]
batch_size = 2
max_steps = 20
seed = 1
[output]
dir = "runs"
name = "term"
"""


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="process groups and SIGTERM are POSIX")
def test_sigterm_to_studio_train_run_stops_the_trainer_with_a_checkpoint(
    tiny_sd15: Path, demo_data: Path, tmp_path: Path
) -> None:
    import signal

    import psutil

    config = SIGTERM_CONFIG.format(model=tiny_sd15, data=demo_data)
    (tmp_path / "studio.toml").write_text(config, encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", **hold_env(2))  # held after step 2 until the signal lands
    with open(tmp_path / "out.txt", "wb") as out_file, open(tmp_path / "err.txt", "wb") as err_file:
        process = subprocess.Popen([sys.executable, "-m", "studio.cli", "run", "studio.toml"], cwd=tmp_path,
                                   env=env, stdout=out_file, stderr=err_file)
        try:
            events = _wait_for_step(tmp_path / "runs", process, 2)
            trainer_group = psutil.Process(process.pid).children(recursive=True)
            assert trainer_group, "studio-train run started no trainer"
            process.send_signal(signal.SIGTERM)  # what a job scheduler sends to the command it started
            process.wait(timeout=scaled_s(120))
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    out = (tmp_path / "out.txt").read_text(encoding="utf-8")
    err = (tmp_path / "err.txt").read_text(encoding="utf-8")
    assert process.returncode == 0, out[-3000:] + err[-3000:]
    assert "SIGTERM: stopping at the next step" in err
    finished = [e for e in read_events(events) if isinstance(e, RunFinished)]
    assert len(finished) == 1 and finished[0].status == "stopped"
    assert finished[0].message == "SIGTERM received" and finished[0].step == 2
    run_dir = events.parent
    assert (run_dir / "checkpoints" / f"step-{finished[0].step}" / "training_state.json").is_file()
    assert f"stopped at step {finished[0].step}; continue with: studio-train resume {run_dir}" in out
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in trainer_group)


# `studio-train run` with SIGTERM sent to itself the moment the launcher has started, before the
# command has looked at it once: the signal a scheduler or a Ctrl+C may send while a run starts.
SIGNALLED_AT_LAUNCH = """\
import os, signal, subprocess, sys, types
import studio.cli._follow as follow
class SignalledAtLaunch(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open("trainer-pid.txt", "w") as pid_file:
            pid_file.write(str(self.pid))
        os.kill(os.getpid(), signal.SIGTERM)
follow.subprocess = types.SimpleNamespace(Popen=SignalledAtLaunch, DEVNULL=subprocess.DEVNULL,
                                          STDOUT=subprocess.STDOUT)
from studio.cli import main
sys.exit(main(["run", "studio.toml"]))
"""


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="process groups and SIGTERM are POSIX")
def test_a_sigterm_while_the_launcher_starts_stops_the_run_and_leaves_no_trainer(
    tiny_sd15: Path, demo_data: Path, tmp_path: Path
) -> None:
    import signal

    import psutil

    (tmp_path / "studio.toml").write_text(SIGTERM_CONFIG.format(model=tiny_sd15, data=demo_data), encoding="utf-8")
    # Held after step 2: a trainer the signal did not reach would still be there when the command has ended.
    env = dict(os.environ, OMP_NUM_THREADS="1", **hold_env(2))
    process = subprocess.run([sys.executable, "-c", SIGNALLED_AT_LAUNCH], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=scaled_s(300))
    launcher = int((tmp_path / "trainer-pid.txt").read_text())
    try:
        left = [p for p in psutil.process_iter() if p.pid == launcher or _in_group(p, launcher)]
        assert not [p for p in left if p.status() != psutil.STATUS_ZOMBIE], (process.stdout + process.stderr)[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(launcher, signal.SIGKILL)
    # The command ends with the run's outcome, not by the signal, and says where the run can go on.
    assert process.returncode == 128 + signal.SIGTERM, (process.stdout + process.stderr)[-3000:]
    assert "SIGTERM: stopping at the next step" in process.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    assert f"without finishing the run; the lines above say why; continue it with: studio-train resume {run_dir}" \
        in process.stderr
    events = run_dir / "events.jsonl"
    assert not events.exists() or not any(isinstance(e, RunFinished) and e.status == "completed"
                                          for e in read_events(events))


def _in_group(process: Any, group: int) -> bool:
    try:
        return os.getpgid(process.pid) == group
    except (ProcessLookupError, PermissionError):
        return False


def _wait_for_step(runs: Path, process: subprocess.Popen[bytes], step: int) -> Path:
    """The run's events.jsonl once it holds the event of `step` (the trainer is past loading)."""
    import time

    deadline = time.monotonic() + scaled_s(300)
    while time.monotonic() < deadline and process.poll() is None:
        for events in runs.glob("*/events.jsonl"):
            if any(isinstance(e, Step) and e.step == step for e in read_events(events)):
                return events
        time.sleep(0.2)
    raise AssertionError(f"the trainer never reached step {step} (exit code {process.poll()})")
