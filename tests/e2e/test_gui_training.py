"""The Train and Runs pages driving the real trainer on the tiny model, as a person would.

Train -> the LoRA on disk, the loss in the plot, the run on the Runs page; Stop -> a
clean `run_finished: stopped`; Resume from the Runs page -> the same run completes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from fixtures.holds import hold_at
from fixtures.waits import files_progress, wait_while_progressing
from pytestqt.qtbot import QtBot

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    ModelSection,
    OutputSection,
    SamplingSection,
    TrainConfig,
    TrainingSection,
)
from studio.core.project.folder import create_project
from studio.core.runs.events import RunFinished, RunStarted, read_events
from studio.gui.context import StudioContext
from studio.gui.runs.page import RunsPage
from studio.gui.runs.table import COLUMNS, STATUS_COLUMN
from studio.gui.training.page import TrainPage
from tests.gui.conftest import close_plots

# One launch takes 5-15 s on a quiet machine (interpreter, torch, accelerate), steps ~50 ms: a run
# that writes nothing to its events or console for this long (scaled to the machine) is stuck.
IDLE_S = 90


@pytest.fixture
def gui_context(qtbot: QtBot, tmp_path: Path) -> Iterator[StudioContext]:
    from PySide6.QtCore import QSettings

    context = StudioContext(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat))
    yield context
    context.run_controller.shutdown()  # a failed test leaves no trainer behind


def _pages(qtbot: QtBot, context: StudioContext, config: TrainConfig, root: Path) -> tuple[TrainPage, RunsPage]:
    context.set_project(create_project(root, config))
    train, runs = TrainPage(context, context.run_controller), RunsPage(context, context.run_controller)
    qtbot.addWidget(train, before_close_func=close_plots)
    qtbot.addWidget(runs, before_close_func=close_plots)
    return train, runs


def _config(tiny_sd15: Path, demo_data: Path, steps: int, sample_every: int = 0) -> TrainConfig:
    return TrainConfig(
        model=ModelSection(family="sd15", base=str(tiny_sd15)),
        dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_data))], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=steps, learning_rate=1e-3, seed=1),
        sampling=SamplingSection(every_n_steps=sample_every, prompts=["a red circle"] if sample_every else [],
                                 steps=2, guidance=1.0),
        output=OutputSection(name="gui"),
    )


def _wait(qtbot: QtBot, train: TrainPage, condition: Callable[[], bool], what: str) -> None:
    """Wait for `condition` while the run writes; only a run that stops writing fails the test."""
    def run_file(name: str) -> Callable[[], Path | None]:
        return lambda: train.controller.model.run_dir / name if train.controller.model.run_dir else None

    wait_while_progressing(qtbot, condition, files_progress(run_file("events.jsonl"), run_file("console.log")),
                           idle_s=IDLE_S, what=what)


def _console(train: TrainPage) -> str:
    run_dir = train.controller.model.run_dir
    return (run_dir / "console.log").read_text(encoding="utf-8")[-3000:] if run_dir else ""


@pytest.mark.slow
def test_train_button_trains_the_tiny_model_to_a_lora(qtbot: QtBot, gui_context: StudioContext, tiny_sd15: Path,
                                                      demo_data: Path, tmp_path: Path) -> None:
    train, runs = _pages(qtbot, gui_context, _config(tiny_sd15, demo_data, steps=8, sample_every=8), tmp_path / "p")
    assert train.start_training(), train.message.text()
    _wait(qtbot, train, lambda: not train.controller.running, "the run to end")
    model = train.controller.model
    assert model.status == "finished", _console(train)
    assert model.run_dir is not None
    lora = model.run_dir / "output" / "pytorch_lora_weights.safetensors"
    assert lora.is_file() and lora.stat().st_size > 1000
    assert lora in [model.resolve(o) for o in model.outputs]
    # What the person sees: eight loss points, the header at the end, one sample, the run listed.
    steps, loss = train.plots.loss.raw.getData()
    assert list(steps) == list(range(1, 9)) and np.isfinite(loss).all()
    assert train.header.step.text() == "8 / 8" and "finished" in train.header.status.text()
    assert train.samples.grid.count() == 1 and train.samples.current() is not None
    assert len(model.memory[0].allocated) == 8  # memory plotted from every step
    assert [s.name for s in runs.table.summaries] == [model.run_dir.name]
    assert runs.table.item(0, STATUS_COLUMN).text() == "completed"
    assert "pytorch_lora_weights.safetensors" in runs.table.item(0, COLUMNS.index("Output")).text()


@pytest.mark.slow
def test_stop_ends_a_real_run_cleanly_and_resume_completes_it(qtbot: QtBot, gui_context: StudioContext,
                                                             tiny_sd15: Path, demo_data: Path,
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    total = 40
    hold_at(monkeypatch, 2)  # the run waits after step 2 until Stop lands, however fast the machine
    train, runs = _pages(qtbot, gui_context, _config(tiny_sd15, demo_data, steps=total), tmp_path / "p")
    assert train.start_training(), train.message.text()
    _wait(qtbot, train, lambda: train.controller.model.step >= 2, "step 2")
    train.stop_button.click()
    _wait(qtbot, train, lambda: not train.controller.running, "the stopped run to end")
    model = train.controller.model
    run_dir = model.run_dir
    assert run_dir is not None
    assert model.status == "stopped", _console(train)
    stopped_at = model.step
    assert stopped_at == 2
    finished = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, RunFinished)]
    assert [f.status for f in finished] == ["stopped"]
    assert model.checkpoints and model.resolve(model.checkpoints[-1].path).is_dir()
    assert runs.table.item(0, STATUS_COLUMN).text() == "stopped"

    runs.table.select_paths([run_dir.name])
    assert runs.buttons["resume"].isEnabled()
    runs.buttons["resume"].click()
    assert train.controller.running and not train.train_button.isEnabled()
    _wait(qtbot, train, lambda: not train.controller.running, "the resumed run to end")
    model = train.controller.model
    assert model.status == "finished", _console(train)
    assert model.started is not None and model.started.resumed_from_step == stopped_at
    # The Train page shows one curve for the whole run: the old steps, then the resumed ones.
    assert train.plots.loss.raw.getData()[0].tolist() == list(range(1, total + 1))
    assert train.header.step.text() == f"{total} / {total}"
    events = read_events(run_dir / "events.jsonl")
    assert [e.status for e in events if isinstance(e, RunFinished)] == ["stopped", "completed"]
    assert sum(isinstance(e, RunStarted) for e in events) == 2
    assert (run_dir / "output" / "pytorch_lora_weights.safetensors").is_file()
    assert runs.table.item(0, STATUS_COLUMN).text() == "completed"
