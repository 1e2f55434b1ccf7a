"""A run folder under pressure: a full disk while checkpointing, a second trainer of the same folder."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from studio.core.config.files.paths import resolve_paths
from studio.core.config.schema import OutputSection, TrainingSection
from studio.core.runs.events import Error, RunFinished

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("how", ["enospc", "torch"])
def test_a_full_disk_while_checkpointing_is_its_own_error_and_leaves_no_half_checkpoint(
    how: str, make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelerate import Accelerator

    from studio.train import errors

    saved: list[str] = []
    save_state = Accelerator.save_state

    def disk_fills_up(self: Accelerator, output_dir: str | None = None, **kwargs: object) -> object:
        saved.append(str(output_dir))
        if len(saved) < 2:
            return save_state(self, output_dir, **kwargs)
        target = Path(str(output_dir))  # half written when the disk ran out (a tmpfs of 30 MB did the same)
        target.mkdir(parents=True)
        (target / "optimizer.bin").write_bytes(b"\0" * 4096)
        if how == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device", str(target / "optimizer.bin"))
        # torch.save on a full tmpfs: no errno, only its writer's complaint; the disk has 48 KB left.
        monkeypatch.setattr(errors, "free_bytes", lambda folder: 48 * 1024)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 86144 vs 86032")

    monkeypatch.setattr(Accelerator, "save_state", disk_fills_up)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=3, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), save_every_n_steps=1))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 1
    (error,) = [e for e in events if isinstance(e, Error)]
    checkpoints = run_dir / "checkpoints"
    first = sum(p.stat().st_size for p in (checkpoints / "step-1").iterdir())
    assert error.kind == "disk_full" and error.path == str(checkpoints)
    assert f"the disk holding {checkpoints} is full" in error.message and "B free" in error.message
    assert error.needed_bytes == first and "needed" in error.message
    assert "resume" in error.hint
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-1"]  # no empty step-2 left behind
    assert (checkpoints / "step-1" / "training_state.json").is_file()
    assert isinstance(events[-1], RunFinished) and events[-1].status == "failed"


def test_a_second_trainer_of_a_held_run_folder_writes_nothing_there(
    make_config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from studio.core.config.files.toml_file import load_config
    from studio.core.runs.launch import prepare_run
    from studio.core.runs.scheduling.lock import RunLock
    from studio.train.entry import train

    run_dir = prepare_run(resolve_paths(make_config(), tmp_path)).run_dir
    with RunLock(run_dir):  # the first trainer, as far as the folder can tell
        code = train(load_config(run_dir / "config.toml"), run_dir, resume=True)
    assert code == 1
    assert f"is being trained by process {os.getpid()}" in capsys.readouterr().err
    assert not (run_dir / "events.jsonl").exists()
    shutil.rmtree(run_dir)
