"""A damaged checkpoint is found before it is used: resume falls back to the newest intact one and says which
it skipped and why; with none intact, an error of kind checkpoint (no traceback)."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    MethodSection,
    OutputSection,
    TrainingSection,
)
from studio.core.runs.events import Error, RunFinished, RunStarted, RunWarning

torch = pytest.importorskip("torch")


def _one_row_larger(path: Path) -> None:
    """Every LoRA tensor one row larger, a well-formed file (what a checkpoint of another rank would be)."""
    from safetensors.torch import load_file, save_file

    state = load_file(str(path))
    save_file({k: torch.cat([v, v[:1]]) for k, v in state.items()}, str(path))


def _cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _header_lies(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 1 << 40) + data[8:])


@pytest.fixture
def stopped_run(make_config, run_training, demo_data: Path, tmp_path: Path, monkeypatch) -> Path:
    """A run stopped at step 4 with checkpoints at steps 2 and 4."""
    from studio.train.loop import Trainer

    config = make_config(method=MethodSection(kind="lora", rank=4),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64,
                                                buckets=False),
                         training=TrainingSection(batch_size=2, max_steps=6, seed=3),
                         output=OutputSection(dir="runs", save_every_n_steps=2))
    original = Trainer._after_step

    def stop_at_four(self: Trainer, epoch: int) -> None:
        original(self, epoch)
        if self.step == 4:
            (self.run_dir / "STOP").write_text("stop", encoding="utf-8")

    monkeypatch.setattr(Trainer, "_after_step", stop_at_four)
    code, run_dir = run_training(config, tmp_path)
    monkeypatch.setattr(Trainer, "_after_step", original)
    assert code == 0 and sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-2", "step-4"]
    return run_dir


DAMAGES = [
    (_one_row_larger, r"trainable_0\.safetensors: .* is \[\d+, \d+\], this run's model has \[\d+, \d+\]"),
    (_cut_in_half, r"trainable_0\.safetensors is \d+ bytes but its header needs \d+"),
    (_header_lies, r"announces a 1099511627776-byte header"),
]


def test_resume_skips_a_damaged_checkpoint_and_says_why(stopped_run: Path, run_training, events_of,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    for number, (damage, why) in enumerate(DAMAGES):
        run = stopped_run.with_name(f"{stopped_run.name}-{number}")
        shutil.copytree(stopped_run, run)
        damage(run / "checkpoints" / "step-4" / "trainable_0.safetensors")
        code, _ = run_training(None, run.parent, resume_dir=run)
        events = events_of(run)
        assert code == 0, [e for e in events if isinstance(e, Error)]
        assert [e.resumed_from_step for e in events if isinstance(e, RunStarted)] == [0, 2]
        (warning,) = [e for e in events if isinstance(e, RunWarning) and "skipped the damaged" in e.message]
        assert warning.message.startswith("resumed from the checkpoint of step 2; skipped the damaged step-4 (")
        assert re.search(why, warning.message), warning.message
        assert isinstance(events[-1], RunFinished) and events[-1].status == "completed" and events[-1].step == 6
    assert "Traceback" not in capsys.readouterr().err


def test_with_no_intact_checkpoint_the_error_is_of_kind_checkpoint(stopped_run: Path, run_training, events_of,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _cut_in_half(stopped_run / "checkpoints" / "step-4" / "trainable_0.safetensors")
    (stopped_run / "checkpoints" / "step-2" / "optimizer.bin").write_bytes(b"not a zip")
    code, _ = run_training(None, stopped_run.parent, resume_dir=stopped_run)
    events = events_of(stopped_run)
    (error,) = [e for e in events if isinstance(e, Error)]
    assert code != 0 and error.kind == "checkpoint"
    assert error.message.startswith("no checkpoint of this run is intact: step-4 (trainable_0.safetensors is ")
    assert "step-2 (optimizer.bin is damaged" in error.message and "start a new run" in error.hint
    assert "Traceback" not in capsys.readouterr().err
    assert json.loads((stopped_run / "checkpoints" / "step-4" / "training_state.json").read_text())["step"] == 4
