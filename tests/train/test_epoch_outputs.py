"""output.save_every_n_epochs: the LoRA as it was at the end of each N-th epoch, beside the final one."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors import safe_open

from studio.core.config.schema import OutputSection, TrainingSection
from studio.core.runs.events import EpochSaved, Error, RunFinished

torch = pytest.importorskip("torch")


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), "pt") as handle:
        return {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118


def test_each_epoch_leaves_a_lora_equal_to_a_run_that_stopped_there(make_config, run_training, events_of,
                                                                    tmp_path: Path) -> None:
    # 8 demo images, batch 2: 4 steps per epoch; 8 steps are 2 epochs.
    def config(steps: int, every: int, runs: str):  # type: ignore[no-untyped-def]
        return make_config(training=TrainingSection(batch_size=2, max_steps=steps, learning_rate=1e-3, seed=1),
                           output=OutputSection(dir=str(tmp_path / runs), name="shapes", save_every_n_epochs=every,
                                                formats=["diffusers", "kohya"]))

    code, run_dir = run_training(config(8, 1, "long"), tmp_path)
    events = events_of(run_dir)
    assert code == 0, [e for e in events if isinstance(e, Error)]
    saved = [e for e in events if isinstance(e, EpochSaved)]
    assert [(e.epoch, e.step) for e in saved] == [(1, 4)]  # epoch 2 ends the run: that is the final output
    epoch_dir = run_dir / "output" / "epoch-0001"
    assert sorted(Path(p).name for p in saved[0].outputs) == ["pytorch_lora_weights.safetensors",
                                                             "shapes-e0001.safetensors"]
    with safe_open(str(epoch_dir / "shapes-e0001.safetensors"), "pt") as handle:
        assert handle.metadata()["ss_epoch"] == "1" and handle.metadata()["ss_steps"] == "4"
    final = next(e for e in events if isinstance(e, RunFinished))
    snapshot = _tensors(epoch_dir / "pytorch_lora_weights.safetensors")
    assert any(not torch.equal(v, _tensors(Path(final.outputs[0]))[k]) for k, v in snapshot.items())

    # The same run stopped after 4 steps ends with exactly those weights.
    code, short_dir = run_training(config(4, 0, "short"), tmp_path)
    assert code == 0
    short = _tensors(short_dir / "output" / "pytorch_lora_weights.safetensors")
    assert snapshot.keys() == short.keys()
    assert all(torch.equal(snapshot[k], short[k]) for k in short)
    assert not (short_dir / "output" / "epoch-0001").exists()


def test_the_runs_history_lists_the_epoch_loras(make_config, run_training, tmp_path: Path) -> None:
    from studio.core.runs.records.history import summarize_run

    config = make_config(training=TrainingSection(batch_size=2, max_steps=8, learning_rate=1e-3, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), name="shapes", save_every_n_epochs=1,
                                              formats=["kohya"]))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    names = [Path(o).name for o in summarize_run(run_dir).outputs]
    assert names == ["shapes.safetensors", "shapes-e0001.safetensors"]


def test_on_windows_the_loras_are_moved_into_place_once_the_antivirus_lets_go(make_config, run_training, events_of,
                                                                           tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows refuses to rename a file (or a folder of files) another program has open, and its antivirus opens
    every file just written for a moment: the LoRA of an epoch, or the final one, failed the run now and then."""
    import os
    import sys
    from typing import Any

    from studio.core import files

    class Windows:
        platform = "win32"

        def __getattr__(self, attribute: str) -> Any:
            return getattr(sys, attribute)

    monkeypatch.setattr(files, "sys", Windows())
    refused: list[str] = []
    real = os.replace

    def replace(source: Any, target: Any) -> None:
        moved = Path(source)
        if ".writing-" in (moved.name + moved.parent.name) and Path(target).parent.name == "output" \
                and moved.name not in refused:  # each move out of the hidden folder: refused once, as while scanned
            refused.append(moved.name)
            raise PermissionError(13, "The process cannot access the file because it is being used by another "
                                      "process", str(source))
        real(source, target)

    monkeypatch.setattr(os, "replace", replace)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=8, learning_rate=1e-3, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), name="shapes", save_every_n_epochs=1,
                                              formats=["kohya"]))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0, [e for e in events_of(run_dir) if isinstance(e, Error)]
    output = run_dir / "output"
    assert (output / "epoch-0001" / "shapes-e0001.safetensors").is_file()
    assert (output / "shapes.safetensors").is_file() and (output / "training_info.json").is_file()
    assert "shapes.safetensors" in refused and any(name.startswith(".writing-") for name in refused)
    assert not list(output.glob(".writing-*"))
