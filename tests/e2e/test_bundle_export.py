"""An exported bundle trains on this machine in its CPU test mode, on one node and on two "nodes"."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.waits import scaled_s

from studio.core.config.files.toml_file import save_config
from studio.core.export.bundle import export_bundle
from studio.core.project.demo import create_demo_project
from studio.core.project.folder import Project
from studio.core.runs.events import RunFinished, RunStarted, Step, read_events
from studio.core.runs.records.history import import_run
from studio.core.runs.records.run_model import replay

pytest.importorskip("torch")
STEPS = 12  # in the project; 6 in a bundle for 2 processes
# About 20 s on an idle 2-core machine; generous because the machine may be shared.
TIMEOUT_S = scaled_s(300)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Project:
    project = create_demo_project(tmp_path_factory.mktemp("demo"), build_model=True)
    config = project.load_config()
    config.training.max_steps = STEPS
    config.sampling.every_n_steps = 0
    config.output.save_every_n_steps = 6
    save_config(config, project.config_path)
    return project


def bundle_env(port: int, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable, "STUDIO_BUNDLE_CPU": "1", "OMP_NUM_THREADS": "1",
            "MAIN_PROCESS_PORT": str(port), **extra}


def assert_complete_run(bundle: Path, world_size: int) -> Path:
    runs = [p for p in (bundle / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    events = read_events(runs[0] / "events.jsonl")
    started = [e for e in events if isinstance(e, RunStarted)]
    assert len(started) == 1 and started[0].world_size == world_size
    assert [e.step for e in events if isinstance(e, Step)] == list(range(1, STEPS // 2 + 1))
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert [f.status for f in finished] == ["completed"]
    assert (runs[0] / "output" / "pytorch_lora_weights.safetensors").is_file()
    return runs[0]


@pytest.mark.slow
def test_bundle_trains_with_two_processes_and_opens_as_a_remote_run(demo: Project, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    export_bundle(demo.config_path, bundle, gpus=2, include_model=True)
    try:
        done = subprocess.run([str(bundle / "launch.sh"), "--check"], env=bundle_env(free_port()),
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"launch.sh ran past {TIMEOUT_S} s; its output:\n{str(exc.stdout)[-3000:]}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All checks passed" in done.stdout and "launch.sh: finished" in done.stdout
    run = assert_complete_run(bundle, world_size=2)

    # Copied back and opened as the Runs page does: the whole loss curve replays.
    imported = import_run(run, tmp_path / "home-runs")
    model = replay(imported)
    assert len(model.loss.view()) == STEPS // 2
    assert model.status == "finished"


@pytest.mark.slow
def test_bundle_trains_across_two_nodes_on_localhost(demo: Project, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    export_bundle(demo.config_path, bundle, gpus=1, nodes=2, include_model=True)
    port = free_port()
    nodes = [
        subprocess.Popen([str(bundle / "launch.sh")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=bundle_env(port, MACHINE_RANK=str(rank), MAIN_PROCESS_IP="127.0.0.1"))
        for rank in (0, 1)
    ]
    outputs = []
    try:
        for node in nodes:
            outputs.append(node.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    assert "node 1 finished; the run's files are on node 0" in outputs[1]
    assert_complete_run(bundle, world_size=2)
    (other,) = (bundle / "node-runs").iterdir()
    assert not (other / "events.jsonl").exists()  # only global rank 0 writes events
