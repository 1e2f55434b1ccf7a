"""Before a preset replaces settings the person set: what they set (what differs from the last preset, or from the
defaults or the preset nearest to them after a restart), and the question naming each one."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QWidget

from studio.core.config.errors import ConfigError
from studio.core.config.files.presets import Preset, apply_preset, default_settings, replaced_settings
from studio.core.config.schema import TrainConfig
from studio.gui.base.questions import confirm


def nearest_preset_config(config: TrainConfig, presets: list[Preset]) -> TrainConfig:
    """The settings as the defaults or the preset they are nearest to (of the project's family and method) give
    them: a preset chosen before the studio was last closed set those values, not the person."""
    defaults = default_settings(config)
    nearest = (len(replaced_settings(config, defaults, defaults)), defaults)
    for preset in presets:
        if (preset.family, preset.method) != (config.model.family, config.method.kind):
            continue
        try:
            applied = apply_preset(config, preset)
        except ConfigError:
            continue
        differ = len(replaced_settings(config, applied, applied))  # the settings that differ at all
        if differ < nearest[0]:
            nearest = (differ, applied)
    return nearest[1]


def replaced_lines(current: TrainConfig, chosen: TrainConfig, last_preset: TrainConfig | None, presets: list[Preset],
                   in_words: Callable[[str], str]) -> list[str]:
    """The settings the person set that `chosen` (a preset applied) replaces, one line each ("key: now → preset's",
    in the form's words): what differs from the last preset chosen, or, with none chosen since the project opened,
    from the defaults or the preset nearest to them."""
    given = last_preset or nearest_preset_config(current, presets)
    return [in_words(f"{key}: {now} → {new}") for key, now, new in replaced_settings(current, chosen, given)]


def ask_replace_settings(parent: QWidget, preset: Preset, lines: list[str]) -> bool:
    """Whether to use `preset` over the settings of `lines` ("key: now → preset's"), the first twelve shown."""
    shown = "\n".join(lines[:12]) + (f"\n… and {len(lines) - 12} more" if len(lines) > 12 else "")
    return confirm(parent, "Use this preset",
                   f"The preset '{preset.title}' replaces settings changed in this project (on this page, in the "
                   f"TOML or in studio.toml itself):\n\n{shown}\n\nUse the preset? "
                   "(Cancel: nothing changes; \"Save as my preset…\" keeps your settings as a preset of "
                   "your own.)", "Use the preset")
