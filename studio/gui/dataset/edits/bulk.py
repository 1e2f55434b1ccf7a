"""The bulk caption dialog: pick an operation and a scope, see how many captions change, apply as one step."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QWidget,
)

from studio.core.dataset.captions import caption_ops as ops
from studio.core.dataset.captions.caption_store import CaptionEdit
from studio.gui.runner.worker import Worker

# Working out an operation over 20,000 captions takes up to a second and a half: it runs on the dialog's worker
# thread (the window stays responsive), once typing pauses, not at every key.
TYPING_PAUSE_MS = 300


@dataclass(frozen=True)
class BulkOp:
    title: str
    first: str  # label of the first field ("" when unused)
    second: str  # label of the second field ("" when unused)
    run: Callable[[ops.Captions, str, str, bool, bool], list[CaptionEdit]]


BULK_OPS: dict[str, BulkOp] = {
    "trigger": BulkOp("Add trigger word", "Trigger word", "", lambda c, a, b, r, s: ops.add_trigger(c, a)),
    "prefix": BulkOp("Add prefix", "Text before", "", lambda c, a, b, r, s: ops.add_text(c, a, "start")),
    "suffix": BulkOp("Add suffix", "Text after", "", lambda c, a, b, r, s: ops.add_text(c, a, "end")),
    "replace": BulkOp("Find and replace", "Find", "Replace with",
                      lambda c, a, b, r, s: ops.find_replace(c, a, b, regex=r, case_sensitive=s)),
    "add_tag": BulkOp("Add tag", "Tag", "", lambda c, a, b, r, s: ops.add_tag(c, a)),
    "remove_tag": BulkOp("Remove tag", "Tag", "", lambda c, a, b, r, s: ops.remove_tag(c, a)),
    "rename_tag": BulkOp("Rename tag", "Tag", "New name", lambda c, a, b, r, s: ops.rename_tag(c, a, b)),
    "sort_tags": BulkOp("Sort tags (keep the first)", "", "", lambda c, a, b, r, s: ops.sort_tags(c, keep_first=1)),
    "clean_tags": BulkOp("Remove duplicate tags and extra spaces", "", "", lambda c, a, b, r, s: ops.clean_tags(c)),
    "template": BulkOp("Caption from template", "Template ({name} {folder} {caption} {index})", "",
                       lambda c, a, b, r, s: ops.from_template(c, a)),
}


# What the dialog asks for: operation, scope, the two fields, regular expression, match case.
Asked = tuple[str, str, str, str, bool, bool]


def work_out(op: BulkOp, captions: ops.Captions, asked: Asked,
             wanted: Callable[[], bool]) -> tuple[list[CaptionEdit], str]:
    """The edits of `asked` over `captions` and the matches' words a find-and-replace adds (on the worker);
    nothing when they are no longer `wanted` (the fields changed again before the worker came to them)."""
    if not wanted():
        return [], ""
    key, _scope, first, second, regex, case = asked
    edits = op.run(captions, first, second, regex, case)
    extra = ""
    if key == "replace" and first:
        extra = f" ({ops.count_matches(captions, first, regex, case)[0]} matches)"
    return edits, extra


class BulkDialog(QDialog):
    """Edits are computed from the captions in scope; `edits` holds them once accepted."""

    def __init__(self, scopes: dict[str, ops.Captions], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Edit captions in bulk")
        self.setObjectName("dataset_bulk_dialog")
        self.scopes = scopes
        self.edits: list[CaptionEdit] = []
        self.worker = Worker(self)
        self._asked: Asked | None = None  # what the edits being worked out are for (None: `edits` are the latest)
        self._accept_when_done = False  # OK pressed while they were worked out
        self.operation = QComboBox()
        for key, op in BULK_OPS.items():
            self.operation.addItem(op.title, key)
        self.scope = QComboBox()
        for name, captions in scopes.items():
            self.scope.addItem(f"{name} ({len(captions)})", name)
        self.first, self.second = QLineEdit(), QLineEdit()
        self.first_label, self.second_label = QLabel(), QLabel()
        self.regex = QCheckBox("Regular expression")
        self.case = QCheckBox("Match case")
        self.case.setChecked(True)
        self.preview = QLabel()
        self.preview.setObjectName("dataset_bulk_preview")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        form = QFormLayout(self)
        form.addRow("Operation", self.operation)
        form.addRow("Apply to", self.scope)
        form.addRow(self.first_label, self.first)
        form.addRow(self.second_label, self.second)
        form.addRow(self.regex, self.case)
        form.addRow(self.preview)
        form.addRow(self.buttons)
        self._typing = QTimer(self, singleShot=True, interval=TYPING_PAUSE_MS)
        self._typing.timeout.connect(self._update)
        for signal in (self.operation.currentIndexChanged, self.scope.currentIndexChanged,
                       self.regex.toggled, self.case.toggled):
            signal.connect(self._update)
        for field in (self.first, self.second):
            field.textChanged.connect(self._typed)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self._update()

    def select(self, key: str, first: str = "", second: str = "", scope: str | None = None) -> None:
        self.operation.setCurrentIndex(self.operation.findData(key))
        if scope is not None:
            self.scope.setCurrentIndex(self.scope.findData(scope))
        self.first.setText(first)
        self.second.setText(second)
        self._update()

    def _typed(self) -> None:
        self._typing.start()
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)  # OK works the edits out

    def accept(self) -> None:
        """OK right after typing works out the edits of the text typed, not of the text before the pause, and
        closes the dialog once they are."""
        if self._typing.isActive():
            self._update()
        if self._asked is not None:
            self._accept_when_done = True
            self._fields_wait(True)  # OK applies what the fields said when it was pressed
        elif self.edits:
            super().accept()

    def done(self, result: int) -> None:
        self._asked = None  # a count still being worked out is not shown
        super().done(result)

    def counting(self) -> bool:
        """The edits are still being worked out on the worker."""
        return self._asked is not None

    def _fields_wait(self, wait: bool) -> None:
        for field in (self.operation, self.scope, self.first, self.second, self.regex, self.case):
            field.setEnabled(not wait)

    def _update(self) -> None:
        self._typing.stop()
        op = BULK_OPS[self.operation.currentData()]
        for label, field, text in ((self.first_label, self.first, op.first), (self.second_label, self.second, op.second)):
            label.setText(text)
            label.setVisible(bool(text))
            field.setVisible(bool(text))
        is_replace = self.operation.currentData() == "replace"
        self.regex.setVisible(is_replace)
        self.case.setVisible(is_replace)
        asked: Asked = (self.operation.currentData(), self.scope.currentData(), self.first.text(),
                        self.second.text(), self.regex.isChecked(), self.case.isChecked())
        self._asked, self.edits = asked, []
        self.preview.setText("Working out the edits…")
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)  # OK waits for them
        self.worker.run(work_out, op, self.scopes[asked[1]], asked, lambda: self._asked == asked,
                        expected=(re.error, ops.TemplateError),
                        on_done=lambda result: self._worked_out(asked, *result),
                        on_failed=lambda exc: self._worked_out(asked, [], "", exc))

    def _worked_out(self, asked: Asked, edits: list[CaptionEdit], extra: str,
                    error: BaseException | None = None) -> None:
        if asked != self._asked:  # the fields changed since, or the dialog closed
            return
        self._asked, self.edits = None, edits
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        accept, self._accept_when_done = self._accept_when_done, False
        self._fields_wait(False)
        if error is not None:
            self.preview.setText(f"Cannot apply: {error}")
            ok.setEnabled(False)
            return
        self.preview.setText(f"{len(edits)} of {len(self.scopes[asked[1]])} captions will change{extra}.")
        ok.setEnabled(bool(edits))
        if accept and edits:
            super().accept()
