"""A settings form generated from the TrainConfig schema: grouped, with tooltips, advanced folded."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.schema import TrainConfig
from studio.gui.page import named

SECTIONS = ("model", "method", "dataset", "training", "sampling", "output")
# The key settings of a preset; everything else scalar is "advanced".
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "model": ("dtype", "use_t5"),
    "method": ("kind", "rank", "alpha", "train_text_encoder"),
    "dataset": ("resolution", "buckets", "flip"),
    "training": ("batch_size", "gradient_accumulation", "epochs", "max_steps", "learning_rate", "optimizer",
                 "mixed_precision", "gradient_checkpointing", "cache_latents", "cache_text_embeddings"),
    "sampling": ("every_n_steps",),
    "output": ("name", "save_every_n_steps"),
}
SKIPPED = {("model", "base"), ("model", "family")}  # chosen by the model picker and the presets


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


def _bounds(field: FieldInfo) -> dict[str, float]:
    out: dict[str, float] = {}
    for meta in field.metadata:
        for name in ("ge", "gt", "le", "lt", "multiple_of"):
            value = getattr(meta, name, None)
            if value is not None:
                out[name] = value
    return out


def _tooltip(field: FieldInfo, kind: Any, optional: bool) -> str:
    parts = [field.description or ""]
    b = _bounds(field)
    low = b.get("ge", b.get("gt"))
    high = b.get("le", b.get("lt"))
    if low is not None or high is not None:
        parts.append(f"Allowed: {'' if low is None else low}…{'' if high is None else high}"
                     + (f", a multiple of {b['multiple_of']:g}" if "multiple_of" in b else ""))
    if typing.get_origin(kind) is Literal:
        parts.append("Allowed: " + ", ".join(map(str, typing.get_args(kind))))
    if optional:
        parts.append("Leave empty for the default.")
    return "\n".join(p for p in parts if p)


def fields_of(section: str) -> list[tuple[str, FieldInfo, Any, bool]]:
    """(name, field, type, optional) of the scalar fields a form can edit."""
    model: type[BaseModel] = typing.cast(type[BaseModel], _section_model(section))
    out = []
    for name, field in model.model_fields.items():
        kind, optional = _unwrap_optional(field.annotation)
        if (section, name) in SKIPPED or typing.get_origin(kind) is list:
            continue
        if kind in (bool, int, float, str) or typing.get_origin(kind) is Literal:
            out.append((name, field, kind, optional))
    return out


def _section_model(section: str) -> Any:
    return TrainConfig.model_fields[section].annotation


class ConfigForm(QWidget):
    """Emits `sig_changed(dotted_key, value)` when a person edits a field."""

    sig_changed = Signal(str, object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("config_form")
        self.editors: dict[str, QWidget] = {}
        self._advanced: list[QWidget] = []
        layout = QVBoxLayout(self)
        self.show_advanced = named(QCheckBox("Show advanced settings"), "show_advanced")
        self.show_advanced.toggled.connect(self._toggle_advanced)
        layout.addWidget(self.show_advanced)
        for section in SECTIONS:
            box = named(QGroupBox(section.capitalize()), f"form_{section}")
            box_layout = QVBoxLayout(box)
            key_form = QFormLayout()
            advanced = named(QWidget(), f"advanced_{section}")
            adv_form = QFormLayout(advanced)
            for name, field, kind, optional in fields_of(section):
                editor = self._editor(f"{section}.{name}", field, kind, optional)
                target = key_form if name in KEY_FIELDS.get(section, ()) else adv_form
                target.addRow(name.replace("_", " "), editor)
            box_layout.addLayout(key_form)
            box_layout.addWidget(advanced)
            advanced.setVisible(False)
            self._advanced.append(advanced)
            layout.addWidget(box)
        layout.addStretch(1)

    def _toggle_advanced(self, on: bool) -> None:
        for widget in self._advanced:
            widget.setVisible(on)

    def _editor(self, key: str, field: FieldInfo, kind: Any, optional: bool) -> QWidget:
        editor: QWidget
        if kind is bool:
            box = QCheckBox()
            box.toggled.connect(lambda on, k=key: self.sig_changed.emit(k, on))
            editor = box
        elif typing.get_origin(kind) is Literal:
            combo = QComboBox()
            for choice in typing.get_args(kind):
                combo.addItem(str(choice), choice)
            combo.activated.connect(lambda _i, k=key, c=combo: self.sig_changed.emit(k, c.currentData()))
            editor = combo
        elif kind is int and not optional:
            spin = QSpinBox()
            b = _bounds(field)
            spin.setRange(int(b.get("ge", b.get("gt", 0))), int(min(b.get("le", b.get("lt", 2**31 - 1)), 2**31 - 1)))
            if "multiple_of" in b:
                spin.setSingleStep(int(b["multiple_of"]))
            spin.editingFinished.connect(lambda k=key, s=spin: self.sig_changed.emit(k, s.value()))
            spin.valueChanged.connect(lambda v, k=key, s=spin: None if s.hasFocus() else self.sig_changed.emit(k, v))
            editor = spin
        else:
            line = QLineEdit()
            if optional:
                line.setPlaceholderText("default")
            line.editingFinished.connect(lambda k=key, e=line, t=kind: self._text_edited(k, e.text(), t))
            editor = line
        editor.setObjectName("field_" + key.replace(".", "_"))
        editor.setToolTip(_tooltip(field, kind, optional))
        self.editors[key] = editor
        return editor

    def _text_edited(self, key: str, text: str, kind: Any) -> None:
        text = text.strip()
        value: Any = text
        if text == "":
            value = None
        elif kind in (int, float):
            try:
                value = kind(float(text)) if kind is int else float(text)
            except ValueError:
                value = text  # the config rejects it with a message naming the key
        self.sig_changed.emit(key, value)

    def set_config(self, config: TrainConfig) -> None:
        """Show `config` without emitting changes."""
        for key, editor in self.editors.items():
            section, name = key.split(".")
            value = getattr(getattr(config, section), name)
            editor.blockSignals(True)
            try:
                if isinstance(editor, QCheckBox):
                    editor.setChecked(bool(value))
                elif isinstance(editor, QComboBox):
                    editor.setCurrentIndex(max(0, editor.findData(value)))
                elif isinstance(editor, QSpinBox):
                    editor.setValue(int(value))
                elif isinstance(editor, QLineEdit):
                    editor.setText("" if value is None else f"{value:g}" if isinstance(value, float) else str(value))
            finally:
                editor.blockSignals(False)

    def value_shown(self, key: str) -> Any:
        editor = self.editors[key]
        if isinstance(editor, QCheckBox):
            return editor.isChecked()
        if isinstance(editor, QComboBox):
            return editor.currentData()
        if isinstance(editor, QSpinBox):
            return editor.value()
        return typing.cast(QLineEdit, editor).text()
