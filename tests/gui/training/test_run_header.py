"""The run header counts as a person does: the first epoch is 1, a stopped stretch is not elapsed time."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from studio.core.runs.events import RunFinished, RunStarted, Step
from studio.core.runs.records.run_model import RunModel
from studio.gui.widgets.run_header import RunHeader


def test_first_epoch_is_one_and_the_stopped_time_is_left_out(qtbot: QtBot) -> None:
    header = RunHeader()
    qtbot.addWidget(header)
    model = RunModel()
    header.refresh(model)
    assert header.epoch.text() == "–"
    model.apply(RunStarted(config={}, world_size=1, total_steps=20, devices=["cpu"], time=1000.0))
    model.apply(Step(step=1, epoch=0, loss=0.5, lr=1e-4, time=1060.0))
    header.refresh(model)
    assert header.epoch.text() == "1"
    model.apply(RunFinished(status="stopped", step=1, time=1120.0))
    model.apply(RunStarted(config={}, world_size=1, total_steps=20, devices=["cpu"], resumed_from_step=1,
                           time=4720.0))  # an hour later
    model.apply(Step(step=2, epoch=1, loss=0.4, lr=1e-4, time=4780.0))
    model.apply(RunFinished(status="completed", step=2, time=4780.0))
    header.refresh(model)
    assert header.epoch.text() == "2"
    assert header.elapsed.text() == "3:00"  # 2 minutes, then 1 after the resume


def test_the_error_banner_shows_the_error_as_it_was_said(qtbot: QtBot) -> None:
    """An error that names a Python type or a prompt's trigger word keeps them (rich text dropped "<...>")."""
    from PySide6.QtGui import QTextDocument

    from studio.core.runs.events import Error
    from studio.gui.widgets.run_header import ErrorBanner

    banner = ErrorBanner()
    qtbot.addWidget(banner)
    model = RunModel()
    message = "sample at step 5 failed while decoding the prompt \"a <sks> dog\": TypeError: got <class 'NoneType'>"
    model.apply(Error(kind="sample", message=message))
    banner.refresh(model)
    shown = QTextDocument()
    shown.setHtml(banner.title.text())
    assert shown.toPlainText() == message


def test_a_slow_runs_speed_is_never_shown_as_none(qtbot: QtBot) -> None:
    header = RunHeader()
    qtbot.addWidget(header)
    model = RunModel()
    model.apply(RunStarted(config={}, world_size=1, total_steps=20, devices=["cuda:0"], time=1000.0))
    for step, speed in ((1, 0.04), (2, 0.04)):  # 25 s an image; the first step is the warm-up's
        model.apply(Step(step=step, epoch=0, loss=0.5, lr=1e-4, samples_per_s=speed, time=1000.0 + 25 * step))
    header.refresh(model)
    assert header.speed.text() == "0.04 img/s"
