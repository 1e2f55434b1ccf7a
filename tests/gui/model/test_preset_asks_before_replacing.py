"""Use this preset over settings a person tuned by hand (rank, learning rate, steps) asks first, naming them;
Cancel keeps them on the page and in studio.toml. A preset over the defaults or over another preset asks nothing."""

from __future__ import annotations

from studio.core.config.files.presets import get_preset
from studio.core.config.files.toml_file import load_config


def test_hand_tuned_settings_are_not_replaced_unasked(make_page) -> None:
    page = make_page()
    path = page.context.project.config_path
    assert page.apply_config_changes({"method.rank": 64, "training.learning_rate": 3e-4, "training.max_steps": 1200,
                                      "training.noise_offset": 0.05})
    asked: list[list[str]] = []
    answer = {"use": False}
    page.confirm_preset = lambda preset, lines: asked.append(lines) or answer["use"]

    page.choose_preset(get_preset("sd15-lora-6gb"))
    assert len(asked) == 1
    lines = "\n".join(asked[0])
    assert "rank: 64 → 16" in lines and "learning rate: 0.0003 → 0.0001" in lines
    assert "max steps: 1200 → None" in lines and "noise offset: 0.05 → 0.0" in lines
    saved = load_config(path)
    assert (saved.method.rank, saved.training.learning_rate, saved.training.max_steps) == (64, 3e-4, 1200)
    assert page.config.method.rank == 64 and page.config.training.noise_offset == 0.05

    answer["use"] = True
    page.choose_preset(get_preset("sd15-lora-6gb"))
    saved = load_config(path)
    assert (saved.method.rank, saved.training.optimizer, saved.training.max_steps) == (16, "adamw8bit", None)

    page.choose_preset(get_preset("sd15-lora"))  # over a preset's own settings: nothing of the person's is lost
    assert len(asked) == 2
    assert page.apply_config_changes({"training.learning_rate": 2e-4})
    page.choose_preset(get_preset("sd15-lora-6gb"))
    assert len(asked) == 3 and asked[2] == ["learning rate: 0.0002 → 0.0001"]


def test_a_preset_over_the_defaults_asks_nothing(make_page) -> None:
    page = make_page()
    page.confirm_preset = lambda preset, lines: (_ for _ in ()).throw(AssertionError(f"asked about {lines}"))
    page.choose_preset(get_preset("sd15-lora-6gb"))
    assert page.config.training.optimizer == "adamw8bit"


def test_after_a_restart_the_last_presets_values_are_not_the_persons(make_page, qtbot, tmp_path) -> None:
    from studio.core.config.files.presets import apply_preset
    from studio.gui.context import StudioContext
    from studio.gui.model.page import ModelPage
    from studio.gui.shell.application import make_settings

    page = make_page()
    page.choose_preset(get_preset("sd15-lora-6gb"))
    assert page.apply_config_changes({"training.learning_rate": 2e-4})
    # The studio started again on the project: the page knows no preset chosen.
    context = StudioContext(make_settings(tmp_path / "again.ini"), hardware_file="rtx4090-24gb")
    context.set_project(page.context.project)
    again = ModelPage(context)
    qtbot.addWidget(again)
    again.hardware.wait()
    asked: list[list[str]] = []
    again.confirm_preset = lambda preset, lines: asked.append(lines) or False
    again.choose_preset(get_preset("sd15-lora"))
    rate = apply_preset(again.config, get_preset("sd15-lora")).training.learning_rate
    assert asked == [[f"learning rate: 0.0002 → {rate}"]]
