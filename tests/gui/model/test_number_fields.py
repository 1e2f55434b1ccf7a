"""A number from studio.toml shows whole in its field: six digits cut a learning rate of 0.0001234567 to
0.000123457, and pressing Enter in the field saved the cut value."""

from __future__ import annotations

from PySide6.QtWidgets import QLineEdit

from studio.core.config.files.toml_file import load_config, save_config
from studio.gui.model.form import number_text


def test_a_learning_rate_of_many_digits_is_shown_and_kept_whole(make_page) -> None:
    page = make_page()
    path = page.context.project.config_path
    config = load_config(path)
    config.training.learning_rate = 0.0001234567
    save_config(config, path)
    assert page.context.reload_config()
    field = page.form.findChild(QLineEdit, "field_training_learning_rate")
    assert field.text() == "0.0001234567"
    field.editingFinished.emit()  # Enter pressed in the field
    assert load_config(path).training.learning_rate == 0.0001234567


def test_short_numbers_stay_short() -> None:
    assert [number_text(v) for v in (1e-4, 3e-05, 1.0, 0.999, 1.29)] == ["0.0001", "3e-05", "1", "0.999", "1.29"]


def test_a_fraction_typed_into_a_whole_number_field_is_refused_not_cut(make_page) -> None:
    """2.5 typed as the epochs trained 2 epochs (and a seed of 42.7 was saved as 42), nothing said."""
    page = make_page()
    path = page.context.project.config_path
    for key, typed in (("training.epochs", "2.5"), ("training.seed", "42.7")):
        before = path.read_text(encoding="utf-8")
        field = page.form.findChild(QLineEdit, "field_" + key.replace(".", "_"))
        field.setText(typed)
        field.editingFinished.emit()
        assert path.read_text(encoding="utf-8") == before
        assert field.text() == typed and key in page.form.invalid
        assert "a valid integer, got a number with a fractional part" in page.form.error_labels[key].text()
    field = page.form.findChild(QLineEdit, "field_training_epochs")
    field.setText("1e1")
    field.editingFinished.emit()
    assert load_config(path).training.epochs == 10


def test_a_seed_too_large_names_the_largest_seed(make_page) -> None:
    page = make_page()
    field = page.form.findChild(QLineEdit, "field_sampling_seed")
    field.setText("5000000000")
    field.editingFinished.emit()
    assert page.form.error_labels["sampling.seed"].text() == "⚠ must be at least 0 and at most 4294967295"


def test_a_count_beyond_what_a_spin_box_holds_opens_and_stays(qtbot, tmp_path) -> None:
    """save_every_n_steps = 99999999999 (a person's "never") raised OverflowError as the Model page and the
    Sample settings opened; now both open, and studio.toml keeps what it says until the field is edited."""
    from studio.core.project.folder import create_project
    from studio.gui.context import StudioContext
    from studio.gui.model.page import ModelPage
    from studio.gui.shell.application import make_settings
    from studio.gui.training.sampling_editor import SamplingEditor

    project = create_project(tmp_path / "project")
    config = load_config(project.config_path)
    config.output.save_every_n_steps = 99_999_999_999
    config.sampling.prompts = ["a cat"]
    config.sampling.every_n_steps = 99_999_999_999
    save_config(config, project.config_path)
    written = project.config_path.read_text(encoding="utf-8")
    context = StudioContext(make_settings(tmp_path / "settings.ini"), hardware_file="rtx4090-24gb")
    context.set_project(project)
    page = ModelPage(context)
    qtbot.addWidget(page)
    editor = SamplingEditor(context)
    qtbot.addWidget(editor)
    assert page.form.value_shown("output.save_every_n_steps") == 2**31 - 1
    assert editor.every.value() == 2**31 - 1
    assert project.config_path.read_text(encoding="utf-8") == written
