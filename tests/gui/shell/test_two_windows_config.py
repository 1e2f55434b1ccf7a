"""Two studio windows on one project: a save in one keeps what the other saved just before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from studio.core.config.files.toml_file import load_config
from studio.core.config.schema import TrainConfig
from studio.core.project.folder import open_project
from studio.gui.context import StudioContext
from tests.gui.conftest import make_project


@pytest.fixture
def two_windows(qtbot: object, tmp_path: Path, config: TrainConfig) -> Iterator[tuple[StudioContext, StudioContext]]:
    make_project(tmp_path / "project", config)
    windows = []
    for name in ("left", "right"):
        window = StudioContext(QSettings(str(tmp_path / f"{name}.ini"), QSettings.Format.IniFormat))
        window.set_project(open_project(tmp_path / "project"))
        windows.append(window)
    yield windows[0], windows[1]
    for window in windows:
        window.run_controller.shutdown()


def test_a_save_in_one_window_keeps_the_other_windows_change(two_windows: tuple[StudioContext, StudioContext],
                                                             tmp_path: Path) -> None:
    left, right = two_windows
    assert left.change_config({"training.max_steps": 77}) == []
    # The right window has not read the file again: it still holds the config from before.
    assert right.change_config({"sampling.prompts": ["a red circle"]}) == []
    on_disk = load_config(tmp_path / "project" / "studio.toml")
    assert on_disk.training.max_steps == 77 and on_disk.sampling.prompts == ["a red circle"]
    assert right.config == on_disk  # the window shows what the file holds now
    # The same key changed in both: the later save's value wins, the rest stays.
    assert left.change_config({"sampling.prompts": ["a blue square"]}) == []
    on_disk = load_config(tmp_path / "project" / "studio.toml")
    assert on_disk.sampling.prompts == ["a blue square"] and on_disk.training.max_steps == 77
