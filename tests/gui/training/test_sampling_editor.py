"""The Sample settings tab writes sampling.* to studio.toml, and the next run samples with it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import load_config
from studio.core.config.schema import TrainConfig
from studio.gui.context import StudioContext
from studio.gui.training.sampling_editor import SamplingEditor
from tests.gui.conftest import make_project


def test_prompts_and_settings_reach_the_file_and_the_run(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                         tmp_path: Path) -> None:
    project = make_project(tmp_path, config)
    context.set_project(project)  # type: ignore[arg-type]
    editor = SamplingEditor(context)
    qtbot.addWidget(editor)
    editor.show()
    assert editor.prompt_list() == []

    for prompt in ("a red circle", "a blue square on grass"):
        editor.add_prompt()
        row = editor.prompts.rowCount() - 1
        editor.prompts.item(row, 0).setText(prompt)  # what typing into the cell does
    editor.negative.setText("blurry")
    editor.negative.editingFinished.emit()
    for spin, value in ((editor.steps, 12), (editor.seed, 7)):
        spin.setValue(value)
        spin.editingFinished.emit()
    editor.guidance.setValue(5.5)
    editor.guidance.editingFinished.emit()
    editor.vae_tiling.setCurrentIndex(editor.vae_tiling.findData("on"))
    editor.vae_tiling.activated.emit(editor.vae_tiling.currentIndex())

    saved = load_config(context.project.config_path).sampling  # type: ignore[union-attr]
    assert saved.prompts == ["a red circle", "a blue square on grass"]
    assert saved.every_n_steps == 100  # a first prompt turns samples on
    assert (saved.negative_prompt, saved.steps, saved.seed, saved.guidance, saved.vae_tiling) == (
        "blurry", 12, 7, 5.5, "on")

    # A size that is not a multiple of 8 is refused with the reason; the file keeps the last good value.
    editor.sample_size.setValue(100)
    editor.sample_size.editingFinished.emit()
    assert "multiple of 8" in editor.problem.text()
    assert load_config(context.project.config_path).sampling.size is None  # type: ignore[union-attr]

    # Removing a prompt by keyboard-selected row.
    editor.prompts.setCurrentCell(0, 0)
    editor.remove_selected()
    assert load_config(context.project.config_path).sampling.prompts == ["a blue square on grass"]  # type: ignore[union-attr]

    ctl = context.run_controller
    from tests.gui.conftest import fake_command

    ctl.command_factory = fake_command("--steps", "3", "--rate", "1000")
    assert context.config is not None
    run_dir = ctl.start_config(resolve_paths(context.config, project.root))  # type: ignore[attr-defined]
    assert run_dir is not None
    qtbot.waitUntil(lambda: not ctl.running, timeout=15000)
    resolved = load_config(run_dir / "config.toml").sampling
    assert resolved.prompts == ["a blue square on grass"] and resolved.steps == 12 and resolved.negative_prompt == "blurry"


def test_a_change_on_disk_shows_in_the_editor(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                              tmp_path: Path) -> None:
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    editor = SamplingEditor(context)
    qtbot.addWidget(editor)
    path = context.project.config_path  # type: ignore[union-attr]
    path.write_text(path.read_text() + '\n[sampling]\nprompts = ["from my editor"]\nevery_n_steps = 5\n')
    qtbot.waitUntil(lambda: editor.prompt_list() == ["from my editor"], timeout=5000)
    assert editor.every.value() == 5
    assert Qt.ItemFlag.ItemIsEditable & editor.prompts.item(0, 0).flags()


def test_a_seed_over_two_billion_is_shown_and_kept(qtbot: QtBot, context: StudioContext, config: TrainConfig,
                                                  tmp_path: Path) -> None:
    """sampling.seed takes any 32-bit seed: 3000000000 was shown as 2147483647 and, once the field was left, saved
    as that: every sample came out another picture than the seed written down makes."""
    config.sampling.seed = 3_000_000_000
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    editor = SamplingEditor(context)
    qtbot.addWidget(editor)
    assert editor.seed.text() == "3000000000"
    editor.seed.editingFinished.emit()  # what leaving the field does
    assert load_config(context.project.config_path).sampling.seed == 3_000_000_000  # type: ignore[union-attr]
    editor.seed.setValue(2**32 - 1)
    editor.seed.editingFinished.emit()
    assert load_config(context.project.config_path).sampling.seed == 2**32 - 1  # type: ignore[union-attr]


def test_a_prompts_own_settings_are_named_and_a_bad_one_refused_with_its_number(
        qtbot: QtBot, context: StudioContext, config: TrainConfig, tmp_path: Path) -> None:
    project = make_project(tmp_path, config)
    context.set_project(project)  # type: ignore[arg-type]
    editor = SamplingEditor(context)
    qtbot.addWidget(editor)
    assert "--n (negative prompt), --w and --h (width and height), --d (seed)" in editor.options_note.text()
    for prompt in ("a red circle --w 768 --h 512 --d 42", "a cat --ar 16:9"):
        editor.add_prompt()
        editor.prompts.item(editor.prompts.rowCount() - 1, 0).setText(prompt)
    assert "sample prompt 2: --ar is not an option the samples take" in editor.problem.text()
    saved = load_config(context.project.config_path).sampling  # type: ignore[union-attr]
    assert saved.prompts == ["a red circle --w 768 --h 512 --d 42"]


def test_a_negative_prompt_the_samples_would_not_use_is_said_in_the_tab(qtbot: QtBot, context: StudioContext,
                                                                        config: TrainConfig, tmp_path: Path) -> None:
    config.sampling.prompts, config.sampling.every_n_steps = ["a red circle"], 10
    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    editor = SamplingEditor(context)
    qtbot.addWidget(editor)
    editor.show()
    editor.negative.setText("blurry")
    editor.negative.editingFinished.emit()
    assert not editor.negative_note.isVisible()  # read at the default guidance 7
    editor.guidance.setValue(1.0)
    editor.guidance.editingFinished.emit()
    assert editor.negative_note.isVisible()
    assert editor.negative_note.text().startswith(
        "⚠ Sample prompt 1 has a negative prompt that the samples do not use: SD 1.x/2.x draws with a negative "
        "prompt only at a guidance above 1, not at 1.")
    editor.guidance.setValue(3.0)
    editor.guidance.editingFinished.emit()
    assert not editor.negative_note.isVisible()


def test_samples_before_the_first_step_are_a_check_box_saved_to_the_file(qtbot: QtBot, context: StudioContext,
                                                                        config: TrainConfig, tmp_path: Path) -> None:
    from studio.gui.widgets.samples_gallery import waiting_text

    context.set_project(make_project(tmp_path, config))  # type: ignore[arg-type]
    editor = SamplingEditor(context)
    qtbot.addWidget(editor)
    editor.show()
    assert not editor.at_start.isChecked()
    editor.at_start.click()
    assert load_config(context.project.config_path).sampling.at_start  # type: ignore[union-attr]
    # The gallery of a run that samples at its start waits for step 0, even with no samples every N steps.
    sampling = {"prompts": ["a red circle"], "every_n_steps": 0, "at_start": True}
    assert waiting_text(sampling, 0, 30) == "No samples yet: the first samples are made before the first step."
