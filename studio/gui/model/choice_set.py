"""A setting that holds several of a fixed set of choices (output.log_to): one box each."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QWidget

# How a choice reads on its box where the stored word is not what people call it.
CHOICE_TITLES = {"tensorboard": "TensorBoard", "wandb": "Weights & Biases"}


class ChoiceSet(QWidget):
    """Emits `sig_changed(list)` with the ticked choices, in the schema's order, when a person ticks a box."""

    sig_changed = Signal(list)

    def __init__(self, choices: Sequence[str], name: str, parent: QWidget | None = None) -> None:
        """`name` names the set and, with each choice, its boxes: field_output_log_to_tensorboard."""
        super().__init__(parent)
        self.setObjectName(name)
        self.boxes: dict[str, QCheckBox] = {}
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for choice in choices:
            box = QCheckBox(CHOICE_TITLES.get(choice, choice))
            box.setObjectName(f"{name}_{choice}")
            box.toggled.connect(lambda _on: self.sig_changed.emit(self.value()))
            self.boxes[choice] = box
            row.addWidget(box)
        row.addStretch(1)

    def value(self) -> list[str]:
        return [choice for choice, box in self.boxes.items() if box.isChecked()]

    def set_value(self, chosen: Iterable[str]) -> None:
        """Tick `chosen` without emitting a change."""
        wanted = set(chosen)
        for choice, box in self.boxes.items():
            box.blockSignals(True)
            box.setChecked(choice in wanted)
            box.blockSignals(False)
