"""A settings form generated from the TrainConfig schema: grouped, with tooltips, advanced folded."""

from __future__ import annotations

import re
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
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigIssue
from studio.core.config.rules.acting import acts, default_of, value_of
from studio.core.config.schema import TrainConfig
from studio.core.families import conditional_keys, declaration_of
from studio.gui.base.names import named
from studio.gui.model.choice_set import ChoiceSet
from studio.gui.model.field_text import (
    allowed_text,
    bounds,
    number_text,
    parse_text,
    tooltip,
    unwrap_optional,
)

SECTIONS = ("model", "method", "dataset", "training", "sampling", "output")
# The key settings of a preset; everything else scalar is "advanced".
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "model": ("dtype", "use_t5"),
    "method": ("kind", "network", "rank", "alpha", "train_text_encoder"),
    "dataset": ("resolution", "buckets", "flip"),
    "training": ("batch_size", "gradient_accumulation", "epochs", "max_steps", "learning_rate", "optimizer",
                 "mixed_precision", "gradient_checkpointing", "cache_latents", "cache_text_embeddings", "ema"),
    "sampling": ("every_n_steps",),
    "output": ("name", "save_every_n_steps", "log_to"),
}
# base and family: chosen by the model picker and the presets; allow_pickle: only by hand, in the TOML
SKIPPED = {("model", "base"), ("model", "family"), ("model", "allow_pickle")}
# Settings that mean something for some families only (the families' declarations say which);
# the form hides them for the others.
FAMILY_ONLY: dict[str, tuple[str, ...]] = {
    key: tuple(spec.name for spec in declaration_of(key)) for key in conditional_keys()
}
INVALID_STYLE = "border: 1px solid #c62828;"
ERROR_STYLE = "color: #c62828;"
_DOTTED_KEY = re.compile(r"\b(model|method|dataset|training|sampling|output)\.([a-z0-9_]+)\b")
NOTE_STYLE = "color: #1565c0;"
# Settings that name a folder: typed, or chosen with a Folder… button (the page opens the dialog).
FOLDER_FIELDS = {"dataset.mask_folder": "Choose the folder of mask images",
                 "dataset.validation_folder": "Choose a folder of held-out images"}


# The most a spin box holds (a 32-bit int); a whole number the schema allows beyond it (training.seed and
# sampling.seed take any 32-bit seed) is typed into a line: a spin box raised on showing 3000000000.
SPIN_MOST = 2**31 - 1


class SchemaSpinBox(QSpinBox):
    """A whole-number field: any number can be typed (the config says what is wrong with it),
    the arrows and the wheel stay within the schema's range."""

    def __init__(self, low: int, high: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.low, self.high = low, high
        self.setRange(-(2**31) + 1, 2**31 - 1)

    def stepBy(self, steps: int) -> None:
        self.setValue(min(max(self.value() + steps * self.singleStep(), self.low), self.high))


# Lists of fixed choices the form edits, one box per choice. output.formats stays in the TOML: what each
# format means depends on the method (a LoRA is written whatever it says), which boxes would not tell.
CHOICE_SETS = {("output", "log_to")}


def is_choice_set(kind: Any) -> bool:
    """A list of fixed choices (output.log_to)."""
    args = typing.get_args(kind)
    return typing.get_origin(kind) is list and len(args) == 1 and typing.get_origin(args[0]) is Literal


def fields_of(section: str) -> list[tuple[str, FieldInfo, Any, bool]]:
    """(name, field, type, optional) of the fields a form can edit: scalars and sets of fixed choices."""
    model: type[BaseModel] = typing.cast(type[BaseModel], _section_model(section))
    out = []
    for name, field in model.model_fields.items():
        kind, optional = unwrap_optional(field.annotation)
        if (section, name) in SKIPPED or (typing.get_origin(kind) is list and (section, name) not in CHOICE_SETS):
            continue
        if kind in (bool, int, float, str) or typing.get_origin(kind) is Literal or is_choice_set(kind):
            out.append((name, field, kind, optional))
    return out


def _section_model(section: str) -> Any:
    return TrainConfig.model_fields[section].annotation


class ConfigForm(QWidget):
    """Emits `sig_changed(dotted_key, value)` when a person edits a field."""

    sig_changed = Signal(str, object)
    sig_browse = Signal(str)  # a Folder… button of a FOLDER_FIELDS key

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("config_form")
        self.editors: dict[str, QWidget] = {}
        self.kinds: dict[str, tuple[FieldInfo, Any]] = {}
        self.rows: dict[str, tuple[QFormLayout, QWidget]] = {}  # key -> (its form, the row's field widget)
        self.error_labels: dict[str, QLabel] = {}
        self.invalid: dict[str, str] = {}  # key -> why the value typed there was refused
        self.family: str | None = None
        # A choice held until the setting it needs is filled in (masks = folder before its folder): key ->
        # (value chosen, the settings any one of which completes it).
        self.held: dict[str, tuple[Any, tuple[str, ...]]] = {}
        self.shown: TrainConfig | None = None  # the config the fields show
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
                key = f"{section}.{name}"
                cell = self._field_cell(key, self._editor(key, field, kind, optional))
                self.kinds[key] = (field, kind)
                target = key_form if name in KEY_FIELDS.get(section, ()) else adv_form
                target.addRow(name.replace("_", " "), cell)
                self.rows[key] = (target, cell)
            box_layout.addLayout(key_form)
            box_layout.addWidget(advanced)
            advanced.setVisible(False)
            self._advanced.append(advanced)
            layout.addWidget(box)
        layout.addStretch(1)

    def _field_cell(self, key: str, editor: QWidget) -> QWidget:
        """The editor with the line under it that says why a typed value was refused."""
        cell = QWidget()
        column = QVBoxLayout(cell)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(editor)
        error = named(QLabel(), "error_" + key.replace(".", "_"))
        error.setWordWrap(True)
        error.setStyleSheet(ERROR_STYLE)
        error.setVisible(False)
        column.addWidget(error)
        self.error_labels[key] = error
        return cell

    # ------------------------------------------------------------ refused values

    def show_issues(self, issues: list[ConfigIssue]) -> list[ConfigIssue]:
        """Mark each field at fault red with the reason; returns the issues no field here shows."""
        elsewhere = []
        for issue in issues:
            if issue.key not in self.editors:
                elsewhere.append(issue)
                continue
            field, kind = self.kinds[issue.key]
            allowed = allowed_text(field, kind)
            if not allowed or "allowed" in issue.message:
                reason = issue.message
            elif issue.message.startswith("must be"):  # a bound: say the whole range
                reason = f"must be {allowed}"
            else:
                reason = f"{issue.message} (allowed: {allowed})"
            reason = self.in_form_words(reason)
            label = self.error_labels[issue.key]
            if self.is_typed(issue.key):  # kept as typed, red, until fixed
                self.invalid[issue.key] = reason
                self.editors[issue.key].setProperty("invalid", True)
                self.editors[issue.key].setStyleSheet(INVALID_STYLE)
                label.setText("⚠ " + reason)
            else:  # a choice goes back to the value in force; the line says why
                label.setText("⚠ Not changed: " + reason)
            label.setVisible(True)
        return elsewhere

    def in_form_words(self, text: str) -> str:
        """A config message in this form's words: "method.network" is the "network" field here."""
        return _DOTTED_KEY.sub(lambda m: m.group(2).replace("_", " ") if m.group(0) in self.rows else m.group(0),
                               text)

    def clear_issue(self, key: str) -> None:
        if self.invalid.pop(key, None) is None:
            return
        self.editors[key].setProperty("invalid", False)
        self.editors[key].setStyleSheet("")
        self.error_labels[key].setVisible(False)
        self.error_labels[key].setText("")

    def clear_notes(self) -> None:
        """Hide the notes of choices that were not changed (refused typed values keep theirs)."""
        for key, label in self.error_labels.items():
            if key not in self.invalid:
                label.setVisible(False)

    def note(self, key: str, text: str) -> None:
        """A line under `key`'s field about the value taken (a folder not there yet); gone at the next change."""
        label = self.error_labels[key]
        label.setText("⚠ " + text)
        label.setVisible(True)

    def hold(self, key: str, value: Any, fields: tuple[str, ...], what: str) -> None:
        """Keep showing `value` at `key` (not in the config yet), show the settings it needs at once, with
        `what` to fill in under the first of them."""
        self.held[key] = (value, fields)
        for field in fields:
            if field in self.rows:
                form, cell = self.rows[field]
                form.setRowVisible(cell, True)
        note = self.error_labels[fields[0]]
        note.setStyleSheet(NOTE_STYLE)
        note.setText("↳ " + what)
        note.setVisible(True)
        self.editors[fields[0]].setFocus()

    def held_changes(self) -> dict[str, Any]:
        return {key: value for key, (value, _fields) in self.held.items()}

    def release_held(self) -> None:
        """Forget the held choices; their fields show the config again at the next set_config."""
        for _value, fields in self.held.values():
            note = self.error_labels[fields[0]]
            note.setStyleSheet(ERROR_STYLE)
            if fields[0] not in self.invalid:
                note.setVisible(False)
                note.setText("")
        self.held.clear()

    def has_invalid(self) -> bool:
        """Values typed but refused: edits not in the config (nor in studio.toml)."""
        return bool(self.invalid)

    # ------------------------------------------------------------ family

    def show_acting(self, config: TrainConfig) -> None:
        """Show only the settings that act for `config`, as the family declarations say: SD3's flow matching,
        SD1.5's clip skip, a LoRA's rank, the logit-normal parameters with logit-normal sampling…"""
        self.family = config.model.family
        for key in FAMILY_ONLY:
            if key in self.rows:
                form, cell = self.rows[key]
                shown = (acts(config, key) or value_of(config, key) != default_of(config, key)
                         or any(key in fields for _value, fields in self.held.values()))
                form.setRowVisible(cell, shown)
                if not shown:  # a value refused there goes with the row: nothing hidden waits to be fixed
                    self.clear_issue(key)

    def _toggle_advanced(self, on: bool) -> None:
        for widget in self._advanced:
            widget.setVisible(on)

    def _editor(self, key: str, field: FieldInfo, kind: Any, optional: bool) -> QWidget:
        editor: QWidget
        if is_choice_set(kind):
            choices = ChoiceSet([str(c) for c in typing.get_args(typing.get_args(kind)[0])],
                                "field_" + key.replace(".", "_"))
            choices.sig_changed.connect(lambda chosen, k=key: self.sig_changed.emit(k, chosen))
            editor = choices
        elif kind is bool:
            box = QCheckBox()
            box.toggled.connect(lambda on, k=key: self.sig_changed.emit(k, on))
            editor = box
        elif typing.get_origin(kind) is Literal:
            combo = QComboBox()
            for choice in typing.get_args(kind):
                combo.addItem(str(choice), choice)
            combo.activated.connect(lambda _i, k=key, c=combo: self.sig_changed.emit(k, c.currentData()))
            editor = combo
        elif kind is int and not optional and bounds(field).get("le", 0) <= SPIN_MOST:
            b = bounds(field)
            spin = SchemaSpinBox(int(b.get("ge", b.get("gt", 0))),
                                 int(min(b.get("le", b.get("lt", 2**31 - 1)), 2**31 - 1)))
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
        editor.setToolTip(tooltip(field, kind, optional))
        self.editors[key] = editor
        if key in FOLDER_FIELDS:
            return self._with_folder_button(key, editor)
        return editor

    def _with_folder_button(self, key: str, editor: QWidget) -> QWidget:
        row = QWidget()
        line = QHBoxLayout(row)
        line.setContentsMargins(0, 0, 0, 0)
        line.addWidget(editor, 1)
        button = named(QPushButton("Folder…"), "browse_" + key.replace(".", "_"))
        button.setToolTip(FOLDER_FIELDS[key])
        button.clicked.connect(lambda _on=False, k=key: self.sig_browse.emit(k))
        line.addWidget(button)
        return row

    def _text_edited(self, key: str, text: str, kind: Any) -> None:
        self.sig_changed.emit(key, parse_text(text, kind, self._empty(key)))

    def _empty(self, key: str) -> str | None:
        """What an emptied field sets: the empty text where that is the default, else None (the default, or
        refused)."""
        return "" if self.kinds[key][0].default == "" else None

    def is_typed(self, key: str) -> bool:
        """A field a value is typed into (kept as typed when refused), not a choice."""
        return isinstance(self.editors.get(key), QLineEdit | QSpinBox)

    def typed_value(self, key: str) -> Any:
        editor = self.editors[key]
        if isinstance(editor, QLineEdit):
            return parse_text(editor.text(), self.kinds[key][1], self._empty(key))
        return self.value_shown(key)

    def set_config(self, config: TrainConfig, keep_refused: bool = True) -> None:
        """Show `config` without emitting changes.

        A field holding a refused value keeps it (and its reason) while `keep_refused`:
        it is the person's edit, still to be fixed; a config read from disk replaces all."""
        self.show_acting(config)
        before, self.shown = self.shown, config
        for key, editor in self.editors.items():
            if key in self.held:  # the person's choice, waiting for the setting it needs
                continue
            section, name = key.split(".")
            value = getattr(getattr(config, section), name)
            if not keep_refused and key not in self.invalid and self.typing_at(key):
                # studio.toml read again (changed by another program) while the person types here: their
                # unfinished text stays, and what the file now says is told under it.
                if before is not None and getattr(getattr(before, section), name) != value:
                    self.note(key, f"studio.toml was changed on disk and says {self._text_of(value) or 'the default'} "
                                   "here; what you typed is taken when you press Enter or leave the field")
                continue
            if key in self.invalid:
                if keep_refused:
                    continue
                self.clear_issue(key)
            editor.blockSignals(True)
            try:
                if isinstance(editor, ChoiceSet):
                    editor.set_value(value)
                elif isinstance(editor, QCheckBox):
                    editor.setChecked(bool(value))
                elif isinstance(editor, QComboBox):
                    editor.setCurrentIndex(max(0, editor.findData(value)))
                elif isinstance(editor, QSpinBox):  # a count beyond what it holds (99999999999: never) shows its most
                    editor.setValue(min(int(value), editor.maximum()))
                    editor.lineEdit().setModified(False)  # shown as the config has it, though the value was the same
                elif isinstance(editor, QLineEdit):
                    editor.setText(self._text_of(value))
            finally:
                editor.blockSignals(False)

    @staticmethod
    def _text_of(value: Any) -> str:
        return "" if value is None else number_text(value) if isinstance(value, float) else str(value)

    def typing_at(self, key: str) -> bool:
        """Text typed into `key`'s field and not taken yet (neither Enter pressed nor the field left)."""
        editor = self.editors[key]
        line = editor.lineEdit() if isinstance(editor, QSpinBox) else editor
        return isinstance(line, QLineEdit) and line.isModified()

    def value_shown(self, key: str) -> Any:
        editor = self.editors[key]
        if isinstance(editor, ChoiceSet):
            return editor.value()
        if isinstance(editor, QCheckBox):
            return editor.isChecked()
        if isinstance(editor, QComboBox):
            return editor.currentData()
        if isinstance(editor, QSpinBox):
            return editor.value()
        return typing.cast(QLineEdit, editor).text()


def issues_at_changed_fields(issues: list[ConfigIssue], changes: dict[str, Any]) -> list[ConfigIssue]:
    """The issues, each also shown at the field the person changed when it names another key
    (a contradiction: flip on while latents are cached)."""
    placed = list(issues)
    named_keys = {i.key for i in issues}
    for key in changes:
        if key not in named_keys and issues:
            other = issues[0]
            placed.append(ConfigIssue(key=key, value=changes[key], message=f"{other.key}: {other.message}"))
    return placed
