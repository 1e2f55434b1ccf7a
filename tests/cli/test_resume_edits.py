"""`studio-train resume` after the run's config.toml was edited: what accelerate launches is what it says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from studio.cli import main as cli_main
from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
from studio.core.runs.launch import prepare_run


def test_a_second_gpu_given_in_config_toml_is_what_the_resume_launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """launch.num_processes raised from 1 to 2 in a stopped run's config.toml: the resume launched one process
    from the accelerate.yaml of the first start, without a word."""
    import studio.cli.runs.resume as resume

    (tmp_path / "data").mkdir()
    config = TrainConfig(model=ModelSection(family="sd15", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(tmp_path / "data"))]))
    run_dir = prepare_run(resolve_paths(config, tmp_path)).run_dir
    text = (run_dir / "config.toml").read_text(encoding="utf-8")
    (run_dir / "config.toml").write_text(text.replace("num_processes = 1\n", "num_processes = 2\n"), encoding="utf-8")
    launched: list[str] = []

    def follow(command: list[str], folder: Path, *args: Any, **kwargs: Any) -> int:
        launched.append((folder / "accelerate.yaml").read_text(encoding="utf-8"))
        return 0

    monkeypatch.setattr(resume, "follow_training", follow)
    assert cli_main(["resume", str(run_dir)]) == 0
    (yaml,) = launched
    assert "num_processes: 2\n" in yaml and "distributed_type: 'MULTI_GPU'\n" in yaml
    assert "accelerate.yaml made again from config.toml's [launch] edited since: " in capsys.readouterr().out
