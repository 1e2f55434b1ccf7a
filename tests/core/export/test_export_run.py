"""The run folder launch.sh prepares on each node."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.files.toml_file import load_config
from studio.core.export.bundle import export_bundle
from studio.core.export.start_run import main, prepare_bundle_run
from studio.core.project.folder import Project


@pytest.fixture
def bundle(demo: Project, tmp_path: Path) -> Path:
    out = tmp_path / "bundle"
    export_bundle(demo.config_path, out, gpus=1, nodes=2, include_model=True)
    return out


def test_node_zero_prepares_its_run_under_runs(bundle: Path) -> None:
    run = prepare_bundle_run(bundle / "config.toml", 2, 2, 0, "10.1.2.3", 29999, cpu=True)
    assert run.parent == bundle / "runs"
    config = load_config(run / "config.toml")
    assert (config.launch.machine_rank, config.launch.main_process_ip, config.launch.cpu) == (0, "10.1.2.3", True)
    assert Path(config.model.base) == bundle / "model" / "tiny-sd15"
    assert "machine_rank: 0" in (run / "accelerate.yaml").read_text()


def test_other_nodes_keep_runs_for_node_zero(bundle: Path) -> None:
    run = prepare_bundle_run(bundle / "config.toml", 2, 2, 1, "127.0.0.1", 29999)
    assert run.parent == bundle / "node-runs"
    assert not list((bundle / "runs").iterdir())


def test_a_rank_outside_the_nodes_is_refused(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(bundle / "config.toml"), "--processes", "2", "--machines", "2", "--machine-rank", "2"])
    assert code == 2
    assert "launch.machine_rank" in capsys.readouterr().err
