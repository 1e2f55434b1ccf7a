"""One concept's settings on the Dataset page: folder, captions source, DreamBooth prompts, class images."""

from __future__ import annotations

import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigIssue
from studio.core.config.schema import ConceptSection
from studio.gui.base.names import named

CAPTION_SOURCES: tuple[str, ...] = typing.get_args(ConceptSection.model_fields["caption_source"].annotation)
INVALID_STYLE = "border: 1px solid #c62828;"


def _with_button(editor: QLineEdit, button: QPushButton) -> QWidget:
    row = QWidget()
    line = QHBoxLayout(row)
    line.setContentsMargins(0, 0, 0, 0)
    line.addWidget(editor, 1)
    line.addWidget(button)
    return row


class ConceptDetails(QWidget):
    """Emits `sig_edited(concept index, {field: value})` for each finished edit."""

    sig_edited = Signal(int, dict)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("concept_details")
        self.index = -1
        self._filling = False
        self.project_folder: Callable[[], str] = lambda: ""  # the open project's: the panel sets it
        self.path = named(QLineEdit(), "concept_path")
        self.caption_source = named(QComboBox(), "concept_caption_source")
        for source in CAPTION_SOURCES:
            self.caption_source.addItem(source, source)
        self.instance_prompt = named(QLineEdit(), "concept_instance_prompt")
        self.instance_prompt.setPlaceholderText("DreamBooth: e.g. a photo of sks dog")
        self.class_prompt = named(QLineEdit(), "concept_class_prompt")
        self.class_prompt.setPlaceholderText("prior preservation: e.g. a photo of a dog")
        self.class_path = named(QLineEdit(), "concept_class_path")
        self.class_path.setPlaceholderText("folder of class images (made there when missing)")
        self.num_class_images = named(QSpinBox(), "concept_num_class_images")
        self.num_class_images.setRange(0, 100000)
        self.num_class_images.setSpecialValueText("none")
        self.prior_loss_weight = named(QDoubleSpinBox(), "concept_prior_loss_weight")
        self.prior_loss_weight.setRange(0.0, 100.0)
        self.prior_loss_weight.setSingleStep(0.1)
        self.problem = named(QLabel(), "concept_problem")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #c62828;")
        self.editors: dict[str, QWidget] = {
            "path": self.path, "caption_source": self.caption_source, "instance_prompt": self.instance_prompt,
            "class_prompt": self.class_prompt, "class_path": self.class_path,
            "num_class_images": self.num_class_images, "prior_loss_weight": self.prior_loss_weight,
        }
        for key, editor in self.editors.items():
            field = ConceptSection.model_fields[key]
            editor.setToolTip(field.description or "")

        browse_path = QPushButton("Folder…")
        browse_class = QPushButton("Folder…")
        form = QFormLayout()
        form.addRow("Image folder", _with_button(self.path, browse_path))
        form.addRow("Captions from", self.caption_source)
        form.addRow("Instance prompt", self.instance_prompt)
        form.addRow("Class prompt", self.class_prompt)
        form.addRow("Class images", _with_button(self.class_path, browse_class))
        form.addRow("Class images wanted", self.num_class_images)
        form.addRow("Prior-loss weight", self.prior_loss_weight)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(form)
        layout.addWidget(self.problem)

        for key in ("path", "instance_prompt", "class_prompt", "class_path"):
            line = typing.cast(QLineEdit, self.editors[key])
            line.editingFinished.connect(lambda k=key, e=line: self._edited(k, e.text().strip() or None))
        self.caption_source.activated.connect(lambda _i: self._edited("caption_source",
                                                                      self.caption_source.currentData()))
        self.num_class_images.editingFinished.connect(
            lambda: self._edited("num_class_images", self.num_class_images.value()))
        self.prior_loss_weight.editingFinished.connect(
            lambda: self._edited("prior_loss_weight", self.prior_loss_weight.value()))
        browse_path.clicked.connect(lambda: self._browse(self.path, "path"))
        browse_class.clicked.connect(lambda: self._browse(self.class_path, "class_path"))
        self.set_concept(-1, None)

    def set_concept(self, index: int, concept: ConceptSection | None) -> None:
        """Show concept `index` (None: nothing chosen, the fields are disabled)."""
        self.index = index
        self._filling = True
        try:
            values: dict[str, Any] = concept.model_dump() if concept is not None else {}
            for key, editor in self.editors.items():
                value = values.get(key)
                if isinstance(editor, QLineEdit):
                    editor.setText("" if value is None else str(value))
                elif isinstance(editor, QComboBox):
                    editor.setCurrentIndex(max(0, editor.findData(value or "auto")))
                elif isinstance(editor, QSpinBox):
                    editor.setValue(int(value or 0))
                elif isinstance(editor, QDoubleSpinBox):
                    editor.setValue(float(1.0 if value is None else value))
                editor.setEnabled(concept is not None)
                editor.setStyleSheet("")
        finally:
            self._filling = False
        self.problem.setText("")

    def show_issues(self, issues: list[ConfigIssue]) -> None:
        """Refused edits: the fields at fault red, every reason in words under them."""
        for key, editor in self.editors.items():
            at_fault = any(issue.key.endswith(f"].{key}") for issue in issues)
            editor.setStyleSheet(INVALID_STYLE if at_fault else "")
        self.problem.setText("⚠ Not saved: " + "; ".join(f"{i.key}: {i.message}" for i in issues) if issues else "")

    def _edited(self, key: str, value: Any) -> None:
        if not self._filling and self.index >= 0:
            self.sig_edited.emit(self.index, {key: value})

    def _browse(self, target: QLineEdit, key: str) -> None:
        # The folder shown is read against the project (as studio.toml's paths are), not the folder the studio
        # was started from; one not made yet (class images) opens in the project.
        root, typed = self.project_folder(), target.text().strip()
        start = Path(root, typed) if typed else Path(root)
        folder = QFileDialog.getExistingDirectory(self, "Choose a folder", str(start) if start.is_dir() else root)
        if folder:
            target.setText(folder)
            self._edited(key, folder)
