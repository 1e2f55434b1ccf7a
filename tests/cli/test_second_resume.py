"""A second resume of a run being trained is refused, and the refused launch never writes into the live
run's console.log (neither the trainer's refusal nor the studio's closing line)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.cli._follow import follow_training
from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
from studio.core.runs.launch import prepare_run
from studio.core.runs.scheduling.lock import RunLock, write_process_file


@pytest.fixture
def live_run(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    config = TrainConfig(model=ModelSection(family="sd15", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(tmp_path / "data"))]))
    run_dir = prepare_run(resolve_paths(config, tmp_path)).run_dir
    (run_dir / "console.log").write_text("step 10 of the live run\n")
    return run_dir


def test_a_launch_refused_by_the_lock_leaves_the_live_console_alone(live_run: Path,
                                                                    capfd: pytest.CaptureFixture[str]) -> None:
    before = (live_run / "console.log").read_bytes()
    command = [sys.executable, "-m", "studio.train", "--resume", str(live_run)]
    with RunLock(live_run):  # the live trainer, as far as the folder can tell
        code = follow_training(command, live_run)
    assert code == 1
    assert (live_run / "console.log").read_bytes() == before
    err = capfd.readouterr().err
    assert f"is being trained by process {os.getpid()}" in err and "continue it with" not in err


def test_a_resume_while_another_is_starting_is_refused_before_it_starts(live_run: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    write_process_file(live_run, os.getpid())  # a launcher started a moment ago, its trainer not locked yet
    before = (live_run / "console.log").read_bytes()
    assert cli_main(["resume", str(live_run)]) == 1
    assert "is being started by another studio-train or the studio" in capsys.readouterr().err
    assert (live_run / "console.log").read_bytes() == before
