"""Resuming a run that already completed is refused, and its event log is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.schema import TrainingSection

pytest.importorskip("torch")


def test_resume_of_a_completed_run_is_refused(make_config, run_training, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main
    from studio.train.entry import main as trainer_main

    code, run_dir = run_training(make_config(training=TrainingSection(batch_size=2, max_steps=2, seed=1)), tmp_path)
    assert code == 0
    events_before = (run_dir / "events.jsonl").read_bytes()
    capsys.readouterr()

    assert main(["resume", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert f"the run at {run_dir} already completed 2 steps" in err
    assert f"outputs are in {run_dir / 'output'}" in err and "training.max_steps" in err
    # The trainer itself refuses too (the GUI may start it with --resume directly).
    assert trainer_main(["--resume", str(run_dir)]) == 1
    assert "already completed 2 steps" in capsys.readouterr().err
    assert (run_dir / "events.jsonl").read_bytes() == events_before
    assert not (run_dir / "checkpoints").exists()
