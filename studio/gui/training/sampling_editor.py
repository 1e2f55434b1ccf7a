"""Sample images during training: the prompts and how they are made, saved to studio.toml as edited."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigIssue
from studio.core.config.prompt_options import OPTIONS_TAKEN
from studio.core.config.schema import TrainConfig
from studio.core.project.sample_prompts import unread_negative_prompts
from studio.gui.base.names import named
from studio.gui.context import StudioContext


class SamplingEditor(QWidget):
    """Every edit goes to the context (and studio.toml) at once; a refused one is named here."""

    def __init__(self, context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sampling_editor")
        self.context = context
        self._filling = False
        self.prompts = named(QTableWidget(0, 1), "sampling_prompts")
        self.prompts.setHorizontalHeaderLabels(["Prompt"])
        self.prompts.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.prompts.verticalHeader().setVisible(False)
        self.prompts.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.prompts.setMinimumHeight(120)
        add = named(QPushButton("Add prompt"), "sampling_add_prompt")
        remove = named(QPushButton("Remove"), "sampling_remove_prompt")
        self.negative = named(QLineEdit(), "sampling_negative")
        self.negative.setPlaceholderText("what the samples should not show (for every prompt without its own --n)")
        self.every = named(QSpinBox(), "sampling_every")
        self.every.setRange(0, 2**31 - 1)  # the most a spin box holds; the schema sets no upper bound
        self.every.setSpecialValueText("off")
        self.every.setSuffix(" steps")
        self.at_start = named(QCheckBox("and before the first step (the base model's pictures, to compare with)"),
                              "sampling_at_start")
        self.steps = named(QSpinBox(), "sampling_steps")
        self.steps.setRange(1, 500)
        self.guidance = named(QDoubleSpinBox(), "sampling_guidance")
        self.guidance.setRange(0.0, 50.0)
        self.guidance.setSingleStep(0.5)
        # Any 32-bit seed (the schema's): a QSpinBox holds at most 2**31 - 1, and a larger seed in studio.toml
        # raised when shown. Whole numbers of a double are exact far beyond 2**32.
        self.seed = named(QDoubleSpinBox(), "sampling_seed")
        self.seed.setDecimals(0)
        self.seed.setRange(0, 2**32 - 1)
        self.sample_size = named(QSpinBox(), "sampling_size")
        self.sample_size.setRange(0, 4096)
        self.sample_size.setSingleStep(64)
        self.sample_size.setSpecialValueText("the training resolution")
        self.vae_tiling = named(QComboBox(), "sampling_vae_tiling")
        for choice in ("auto", "on", "off"):
            self.vae_tiling.addItem(choice, choice)
        # Beside a run: it makes its samples with the settings in its own folder, whatever is edited here.
        self.running_note = named(QLabel("The run training now makes its samples with the settings it started "
                                         "with; edits here are saved for the next run."), "sampling_running_note")
        self.running_note.setWordWrap(True)
        self.running_note.setVisible(False)
        # Lines pasted from other trainers' prompt files keep their settings; the ones below are the rest's.
        self.options_note = named(QLabel(f"A prompt may end with its own settings: {OPTIONS_TAKEN}, e.g. a cat "
                                         "--w 768 --h 512 --d 42. The settings below are for what it does not "
                                         "set."), "sampling_options_note")
        self.options_note.setWordWrap(True)
        # A negative prompt the family's pipeline would not read at the guidance set: said where it is written.
        self.negative_note = named(QLabel(), "sampling_negative_note")
        self.negative_note.setWordWrap(True)
        self.negative_note.setVisible(False)
        self.problem = named(QLabel(), "sampling_problem")
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #c62828;")

        row = QHBoxLayout()
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        form = QFormLayout()
        form.addRow("Negative prompt", self.negative)
        form.addRow("Make samples every", self.every)
        form.addRow("", self.at_start)
        form.addRow("Denoising steps", self.steps)
        form.addRow("Guidance", self.guidance)
        form.addRow("Seed", self.seed)
        form.addRow("Size", self.sample_size)
        form.addRow("Decode in tiles", self.vae_tiling)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Sample prompts: images made with the model being trained, to watch it learn."))
        layout.addWidget(self.running_note)
        layout.addWidget(self.prompts, 1)
        layout.addWidget(self.options_note)
        layout.addLayout(row)
        layout.addLayout(form)
        layout.addWidget(self.negative_note)
        layout.addWidget(self.problem)

        add.clicked.connect(self.add_prompt)
        remove.clicked.connect(self.remove_selected)
        self.prompts.itemChanged.connect(lambda _item: self._prompts_edited())
        self.at_start.toggled.connect(lambda on: self.commit({"sampling.at_start": on}))
        self.negative.editingFinished.connect(lambda: self.commit({"sampling.negative_prompt": self.negative.text()}))
        for key, spin in (("every_n_steps", self.every), ("steps", self.steps)):
            spin.editingFinished.connect(lambda k=key, s=spin: self.commit({f"sampling.{k}": s.value()}))
        self.seed.editingFinished.connect(lambda: self.commit({"sampling.seed": round(self.seed.value())}))
        self.guidance.editingFinished.connect(lambda: self.commit({"sampling.guidance": self.guidance.value()}))
        self.sample_size.editingFinished.connect(lambda: self.commit({"sampling.size": self.sample_size.value() or None}))
        self.vae_tiling.activated.connect(lambda _i: self.commit({"sampling.vae_tiling": self.vae_tiling.currentData()}))
        context.sig_config_changed.connect(self.show_config)
        context.unsaved_edits.append(lambda: "a refused sample setting" if self.problem.text() else "")
        # The refused setting is let go (another project opened, studio.toml read again over it): not asked again.
        context.sig_project_changed.connect(self._let_go)
        context.sig_edits_discarded.connect(self._let_go)
        if context.config is not None:
            self.show_config(context.config)

    # ------------------------------------------------------------ showing

    def show_config(self, config: TrainConfig) -> None:
        s = config.sampling
        self._filling = True
        try:
            if self.prompt_list() != s.prompts:
                self.prompts.setRowCount(0)
                for prompt in s.prompts:
                    self._append_row(prompt)
            if not self.negative.hasFocus():
                self.negative.setText(s.negative_prompt)
            for spin, value in ((self.every, s.every_n_steps), (self.steps, s.steps), (self.seed, s.seed),
                                (self.sample_size, s.size or 0)):
                if not spin.hasFocus():  # a count beyond what it holds (99999999999: never) shows its most
                    spin.setValue(min(value, int(spin.maximum())))
            if not self.guidance.hasFocus():
                self.guidance.setValue(s.guidance)
            self.vae_tiling.setCurrentIndex(self.vae_tiling.findData(s.vae_tiling))
            self.at_start.setChecked(s.at_start)
            unread = unread_negative_prompts(config)
            self.negative_note.setText(f"⚠ {unread}." if unread else "")
            self.negative_note.setVisible(bool(unread))
        finally:
            self._filling = False

    def _append_row(self, text: str) -> QTableWidgetItem:
        row = self.prompts.rowCount()
        self.prompts.insertRow(row)
        item = QTableWidgetItem(text)
        self.prompts.setItem(row, 0, item)
        return item

    def prompt_list(self) -> list[str]:
        items = (self.prompts.item(r, 0) for r in range(self.prompts.rowCount()))
        return [item.text().strip() for item in items if item is not None and item.text().strip()]

    def show_running(self, running: bool) -> None:
        """Whether a run is training now (its samples do not take the edits made here)."""
        self.running_note.setVisible(running)

    def _let_go(self, _project: object = None) -> None:
        self.problem.setText("")

    # ------------------------------------------------------------ editing

    def add_prompt(self) -> None:
        """A new row to type the prompt into; it is saved once it has text."""
        self._filling = True
        item = self._append_row("")
        self._filling = False
        self.prompts.setCurrentItem(item)
        self.prompts.editItem(item)

    def remove_selected(self) -> None:
        rows = sorted({index.row() for index in self.prompts.selectedIndexes()}, reverse=True)
        if not rows and self.prompts.currentRow() >= 0:
            rows = [self.prompts.currentRow()]
        self._filling = True
        for row in rows:
            self.prompts.removeRow(row)
        self._filling = False
        self._prompts_edited()

    def _prompts_edited(self) -> None:
        if not self._filling:
            changes: dict[str, Any] = {"sampling.prompts": self.prompt_list()}
            if changes["sampling.prompts"] and self.every.value() == 0:
                # A prompt with samples off would never show: start with a sample every 100 steps.
                changes["sampling.every_n_steps"] = 100
            self.commit(changes)

    def commit(self, changes: dict[str, Any]) -> list[ConfigIssue]:
        if self._filling:
            return []
        issues = self.context.change_config(changes)
        self.problem.setText("⚠ Not saved: " + "; ".join(str(i) for i in issues) if issues else "")
        return issues
