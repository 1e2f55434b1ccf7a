"""`studio-train command`, `resume` on a wrong folder, and `python -m studio.train` argument errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.cli import main

CONFIG = """\
schema_version = 1
[model]
family = "sd15"
base = "models/tiny-sd15"
[[dataset.concepts]]
path = "data"
[output]
dir = "runs"
name = "shapes"
"""


def test_command_prints_the_launch_without_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "studio.toml").write_text(CONFIG, encoding="utf-8")
    assert main(["command", str(tmp_path / "studio.toml")]) == 0
    out = capsys.readouterr().out
    assert "studio.train.launcher --config_file" in out and "-m studio.train" in out
    assert str(tmp_path / "runs") in out and "-shapes/config.toml" in out
    assert not (tmp_path / "runs").exists()


def test_command_prepare_writes_the_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "studio.toml").write_text(CONFIG, encoding="utf-8")
    assert main(["command", str(tmp_path / "studio.toml"), "--processes", "2", "--prepare"]) == 0
    run_dir = next((tmp_path / "runs").iterdir())
    yaml = (run_dir / "accelerate.yaml").read_text()
    assert "num_processes: 2" in yaml and "distributed_type: 'MULTI_GPU'" in yaml and "use_cpu: false" in yaml
    assert capsys.readouterr().out.strip() == (run_dir / "command.txt").read_text().strip()


def test_resume_rejects_a_folder_that_is_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resume", str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_trainer_needs_a_config_or_resume() -> None:
    from studio.train.entry import parse_args

    with pytest.raises(SystemExit):
        parse_args([])
    assert parse_args(["--resume", "runs/x"]).resume == "runs/x"
