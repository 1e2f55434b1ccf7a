"""The base model a chosen preset trains (Model & Preset, the New Project wizard): a preset made for one
size of a family (FLUX.2 [klein] 9B) on a project of another size switches the base once the person says so;
a preset of another family brings its base in place of the old family's default."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QMessageBox, QWidget

from studio.core.config.files.presets import Preset, preset_size, size_base_for
from studio.core.config.schema import TrainConfig
from studio.core.families import family
from studio.core.families import title as family_title
from studio.core.models.known import default_base


@dataclass(frozen=True)
class SizeSwitch:
    """The base the preset's size trains from, in place of the project's."""

    old_base: str
    new_base: str
    old_size: str  # "4B"
    new_size: str  # "9B"


def size_switch(preset: Preset, config: TrainConfig, resolved: TrainConfig) -> SizeSwitch | None:
    """The switch to offer when the project (`resolved`: its model folder readable) trains another size of
    the preset's family; None when it is that size, another family, or the family has one size."""
    spec = family(preset.family)
    new_base = size_base_for(preset, resolved)
    if new_base is None or config.model.family != preset.family or spec.size_of is None:
        return None
    return SizeSwitch(config.model.base, new_base, spec.size_of(resolved.model.base).upper(),
                      str(preset_size(preset)).upper())


def followed_base(preset: Preset, config: TrainConfig, resolved: TrainConfig) -> str | None:
    """The base a preset of another family brings when the project's base is its family's default (nothing
    the person chose): that family's default, or the preset's size's; None otherwise."""
    old = config.model
    if preset.family == old.family or old.base != default_base(old.family):
        return None
    return size_base_for(preset, resolved) or default_base(preset.family)


def ask_size_switch(parent: QWidget, preset: Preset, switch: SizeSwitch) -> bool | None:
    """True: switch the base; False: keep it; None: do not use the preset."""
    name = family_title(preset.family)
    text = (f"“{preset.title}” is made for the {name} {switch.new_size}, and this project trains the "
            f"{switch.old_size} ({switch.old_base}).\n\n"
            f"Yes: train the {switch.new_size}: the base model becomes {switch.new_base}.\n"
            f"No: keep the {switch.old_size} with the preset's settings (the preset's estimate is for the "
            f"{switch.new_size}).")
    buttons = (QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No
               | QMessageBox.StandardButton.Cancel)
    answer = QMessageBox.question(parent, f"Train the {name} {switch.new_size}?", text, buttons,
                                  QMessageBox.StandardButton.Yes)
    if answer == QMessageBox.StandardButton.Cancel:
        return None
    return answer == QMessageBox.StandardButton.Yes


def switch_status(preset: Preset, switch: SizeSwitch, switched: bool) -> str:
    """The status line after the preset is used: what the base model is now, and why."""
    if switched:
        return (f"Preset: {preset.title}. Base model changed from {switch.old_base} to {switch.new_base}: "
                f"the preset is made for the {switch.new_size}.")
    return (f"Preset: {preset.title}, on the {switch.old_size} base {switch.old_base} (the preset is made for "
            f"the {switch.new_size}).")
