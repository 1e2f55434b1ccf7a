"""The project's studio.toml as text: edited here, checked, and written only once it is valid."""

from __future__ import annotations

from PySide6.QtGui import QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigError
from studio.core.config.files.toml_file import dump_config
from studio.gui.base.config_watch import read_text
from studio.gui.base.names import named
from studio.gui.base.questions import confirm
from studio.gui.context import StudioContext


class TomlDialog(QDialog):
    """Apply validates the text (every problem shown with its line) and only then saves it."""

    def __init__(self, context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self.setObjectName("toml_dialog")
        self.setWindowTitle("studio.toml")
        self.view = named(QPlainTextEdit(), "toml_view")
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.problems = named(QLabel(), "toml_problems")
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet("color: #c62828;")
        self.apply_button = named(QPushButton("Apply"), "toml_apply")
        self.apply_button.setToolTip("Check the text and save it as the project's studio.toml")
        self.revert_button = named(QPushButton("Revert"), "toml_revert")
        close = named(QPushButton("Close"), "toml_close")
        buttons = QHBoxLayout()
        buttons.addWidget(self.apply_button)
        buttons.addWidget(self.revert_button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.problems)
        layout.addLayout(buttons)
        self.apply_button.clicked.connect(self.apply)
        self.revert_button.clicked.connect(self.load)
        close.clicked.connect(self.close)
        self.view.textChanged.connect(self._edited)
        context.sig_config_changed.connect(self._config_changed)
        context.sig_edits_discarded.connect(self.load)
        # Another project opened: its studio.toml is shown (Apply writes the open project's file, never
        # one project's text over another's).
        context.sig_project_changed.connect(self._project_changed)
        context.unsaved_edits.append(self.unsaved)
        self.finished.connect(self._forget)
        self._shown = ""
        self._overtaken = False  # the project's settings changed (on the page beside) while this text was edited
        self.load()
        self.resize(640, 560)

    def current_text(self) -> str:
        """What studio.toml holds now (with the person's comments), or the config as TOML."""
        project = self.context.project
        text = read_text(project.config_path) if project is not None else None
        if text is None and self.context.config is not None:
            text = dump_config(self.context.config)
        return text or ""

    def load(self) -> None:
        self._shown, self._overtaken = self.current_text(), False
        self.view.setPlainText(self._shown)
        self._show_problems(None)

    def modified(self) -> bool:
        return self.view.toPlainText() != self._shown

    def unsaved(self) -> str:
        return "the TOML being edited" if self.isVisible() and self.modified() else ""

    def apply(self) -> bool:
        """Validate and save; False (and each problem with its line) when the text cannot be used."""
        if self.context.project is None:
            self._show_problems("Open a project first: the TOML is its studio.toml.")
            return False
        text = self.view.toPlainText()
        if self._overtaken and not confirm(
                self, "studio.toml changed since", "The project's settings were changed since this text was shown "
                "(on the Model page, by a preset or another window). Apply writes this text whole: those changes "
                "are lost.\n\nApply it anyway? (Cancel: nothing is written; copy your edit, press Revert to see the "
                "settings as they are now, and make it there again.)", "Apply my text"):
            return False
        try:
            self.context.apply_toml(text)
        except ConfigError as exc:
            self._show_problems(exc.describe(), [i.line for i in exc.issues if i.line])
            return False
        except OSError as exc:
            self._show_problems(f"studio.toml could not be written: {exc}")
            return False
        self._shown, self._overtaken = text, False
        self._show_problems(None)
        self.context.status("Saved studio.toml")
        return True

    def reject(self) -> None:
        """Close, Escape or the title bar's cross: text edited and not applied goes only once the person says so."""
        if self.modified() and not self._discard_asked():
            return  # still shown: QDialog's close event is ignored too
        super().reject()

    def _discard_asked(self) -> bool:
        return confirm(self, "studio.toml not saved", "The text edited here is not applied: studio.toml stays as it "
                       "was.\n\nClose and lose your edits? (Cancel: go back to them; Apply saves them once they are "
                       "valid.)", "Discard my edits")

    def _show_problems(self, text: str | None, lines: list[int] | None = None) -> None:
        self.problems.setText(f"⚠ Not saved: {text}" if text else "")
        self.problems.setVisible(bool(text))
        marks = []
        for line in lines or []:
            block = self.view.document().findBlockByNumber(line - 1)
            if not block.isValid():
                continue
            mark = QTextEdit.ExtraSelection()
            fmt = QTextCharFormat()
            fmt.setBackground(self.palette().color(self.palette().ColorRole.Highlight).lighter(170))
            fmt.setProperty(QTextFormat.Property.FullWidthSelection, True)
            mark.format = fmt
            mark.cursor = QTextCursor(block)
            marks.append(mark)
        self.view.setExtraSelections(marks)

    def _edited(self) -> None:
        self.apply_button.setEnabled(self.modified())

    def _config_changed(self, _config: object) -> None:
        if not self.modified():  # a change from the form or from disk shows here too
            self.load()
        else:
            self._overtaken = True

    def _project_changed(self, _project: object) -> None:
        self.load()

    def _forget(self) -> None:
        if self.unsaved in self.context.unsaved_edits:
            self.context.unsaved_edits.remove(self.unsaved)
        self.context.sig_config_changed.disconnect(self._config_changed)
        self.context.sig_edits_discarded.disconnect(self.load)
        self.context.sig_project_changed.disconnect(self._project_changed)
