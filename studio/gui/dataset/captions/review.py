"""Caption with…: run a captioning model on the selection or every image, review its captions beside the
person's, accept all, some or none; every accept is one undo step of the Dataset page.

The model only proposes (it runs in another process and writes nothing); what would be
written is decided here from the rules (mode, trigger word, blacklist, tag thresholds), so
moving a threshold updates every proposal and the preview at once, without the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtGui import QBrush, QCloseEvent, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.core.dataset.captions.auto_caption import (
    MODE_HELP,
    MODES,
    CaptionRules,
    MachineCaption,
    compose,
    parse_blacklist,
)
from studio.core.dataset.captions.caption_store import CaptionEdit, CaptionStore
from studio.core.dataset.captions.caption_tags import estimate_tokens
from studio.core.families import DEFAULT_FAMILY, family, is_family
from studio.gui.base.names import named
from studio.gui.context import StudioContext
from studio.gui.dataset.captions.job import CaptionJob, ask_stop_captioning, captioning_python
from studio.gui.dataset.captions.picker import CaptionerPicker
from studio.gui.dataset.captions.review_preview import ProposalPreview

PushEdits = Callable[[list[CaptionEdit], str], None]
COLUMNS = ("Image", "Caption now", "Proposed caption", "Tokens")
TABLE_DELAY_MS = 150
REFILL_SLICE = 500  # rows refilled per event-loop turn (about 40 ms)
_KEPT = "(left as it is)"


class CaptionReviewDialog(QDialog):
    """Runs one captioning job at a time and holds its proposals until they are accepted or rejected."""

    def __init__(self, store: CaptionStore, selected: Sequence[Path], push_edits: PushEdits,
                 context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Caption with a model")
        self.setObjectName("dataset_caption_dialog")
        self.store, self.push_edits, self.settings = store, push_edits, context.settings
        self.scopes: dict[str, list[Path]] = {"Selected images": list(selected), "All images": list(store.entries)}
        # The job reads the project's dataset as the trainer does, in the training environment.
        self.python = captioning_python(context.config)
        self.dataset = context.project.root if context.project is not None else Path.cwd()
        # The project's family's text encoder reads the captions: its limit is where a caption is too long.
        name = context.config.model.family if context.config is not None else DEFAULT_FAMILY
        use_t5 = context.config is not None and context.config.model.use_t5
        self.limit, self.encoder = family(name if is_family(name) else DEFAULT_FAMILY).text_reader(use_t5)
        self.proposals: dict[Path, MachineCaption] = {}
        self.reading = False  # the Dataset page reads the dataset again: accepting waits for its new store
        self.proposed_by = ""  # the model of the job that made the proposals
        self.rows: list[Path] = []  # the table's rows, in order
        self.job = CaptionJob(self)
        # Asked before Close, Escape or the title bar's cross stop a job running; tests replace it.
        self.confirm_stop: Callable[[], bool] = lambda: ask_stop_captioning(self)
        # Thousands of rows take a moment to fill: they follow a slider or a keystroke after a pause.
        self._table_timer = QTimer(self, singleShot=True, interval=TABLE_DELAY_MS)
        self._table_timer.timeout.connect(self._refill_table)
        self._refilled = 0  # rows refilled with the rules now; the rest follow a slice per turn
        self._refill_timer = QTimer(self, singleShot=True, interval=0)
        self._refill_timer.timeout.connect(self._refill_some)
        self.job.sig_started.connect(self._started)
        self.job.sig_caption.connect(self.add_proposal)
        self.job.sig_progress.connect(self._progress)
        self.warnings: list[str] = []  # the job's per-image problems (unreadable, sharing a caption file)
        self.job.sig_warning.connect(self._warned)
        self.job.sig_finished.connect(self._finished)
        self._build()
        self._restore()
        self._running_changed()
        self.refresh()

    # ------------------------------------------------------------ layout

    def _build(self) -> None:
        # The captioners the studio knows (Download for one not here yet), or a folder of one's own.
        self.picker = CaptionerPicker(self.python)
        self.model = self.picker.combo
        self.picker.sig_changed.connect(self._say_where)
        self.picker.sig_downloaded.connect(self._downloaded)
        self.scope = named(QComboBox(), "caption_scope")
        for name, images in self.scopes.items():
            self.scope.addItem(f"{name} ({len(images)})", name)
        if not self.scopes["Selected images"]:
            self.scope.setCurrentIndex(self.scope.findData("All images"))
        self.mode = named(QComboBox(), "caption_mode")
        for mode in MODES:
            self.mode.addItem(f"{mode}: {MODE_HELP[mode]}", mode)
        self.prefix = named(QLineEdit(), "caption_prefix")
        self.prefix.setPlaceholderText("trigger word, always first")
        self.blacklist = named(QLineEdit(), "caption_blacklist")
        self.blacklist.setPlaceholderText("tags never written, comma-separated")
        self.start_button = named(QPushButton("Start"), "caption_start")
        self.stop_button = named(QPushButton("Stop"), "caption_stop")
        self.start_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.job.stop)
        self.progress = named(QProgressBar(), "caption_progress")
        self.status = named(QLabel("Choose a model and press Start; nothing is written until you accept."),
                            "caption_status")
        self.status.setWordWrap(True)
        run_row = QHBoxLayout()
        for widget in (self.start_button, self.stop_button, self.progress):
            run_row.addWidget(widget)
        form = QFormLayout()
        form.addRow("Model", self.picker)
        form.addRow("Images", self.scope)
        form.addRow("Mode", self.mode)
        form.addRow("Trigger word", self.prefix)
        form.addRow("Never write", self.blacklist)
        form.addRow(run_row)
        form.addRow(self.status)
        split = QSplitter()
        split.addWidget(self._build_table())
        split.addWidget(self._build_preview())
        split.setStretchFactor(0, 3)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(split, 1)
        layout.addLayout(self._build_buttons())
        for signal in (self.mode.currentIndexChanged, self.prefix.textChanged, self.blacklist.textChanged,
                       self.general.valueChanged, self.character.valueChanged):
            signal.connect(self.refresh)
        self.resize(1100, 700)

    def _build_table(self) -> QTableWidget:
        self.table = named(QTableWidget(0, len(COLUMNS)), "caption_table")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        self.table.horizontalHeader().setStretchLastSection(False)
        for column, width in enumerate((140, 260, 320, 60)):
            self.table.setColumnWidth(column, width)
        self.table.currentCellChanged.connect(lambda *_: self._show_preview())
        return self.table

    def _build_preview(self) -> QWidget:
        panel = self.preview_panel = ProposalPreview()
        self.preview_image, self.preview, self.preview_tokens = panel.image_label, panel.text, panel.tokens
        self.general, self.character, self.pictures = panel.general, panel.character, panel.pictures
        self.general_label, self.character_label = panel.general_label, panel.character_label
        return panel

    def _build_buttons(self) -> QHBoxLayout:
        self.accept_button = named(QPushButton("Accept selected"), "caption_accept")
        self.reject_button = named(QPushButton("Reject selected"), "caption_reject")
        self.accept_all_button = named(QPushButton("Accept all"), "caption_accept_all")
        close = named(QPushButton("Close"), "caption_close")
        self.accept_button.clicked.connect(lambda: self.accept_rows(self.selected_rows()))
        self.reject_button.clicked.connect(lambda: self.reject_rows(self.selected_rows()))
        self.accept_all_button.clicked.connect(lambda: self.accept_rows(list(range(len(self.rows)))))
        close.clicked.connect(self.close)
        row = QHBoxLayout()
        for button in (self.accept_button, self.reject_button, self.accept_all_button):
            row.addWidget(button)
        row.addStretch(1)
        row.addWidget(close)
        return row

    def _restore(self) -> None:
        model = str(self.settings.value("caption/model", "") or "")
        if model:
            self.picker.choose(model)
        self._say_where()
        self.prefix.setText(str(self.settings.value("caption/prefix", "") or ""))
        self.blacklist.setText(str(self.settings.value("caption/blacklist", "") or ""))

    # ------------------------------------------------------------ the job

    def rules(self) -> CaptionRules:
        return CaptionRules(self.mode.currentData(), self.prefix.text(), parse_blacklist(self.blacklist.text()),
                            self.general.value() / 100, self.character.value() / 100)

    def chosen_model(self) -> str:
        return self.picker.chosen_model()

    def not_here(self) -> str:
        return self.picker.not_here()

    def _downloaded(self, name: str) -> None:
        self.status.setText(f"{name} is downloaded: press Start to caption with it.")

    def _say_where(self) -> None:
        if not self.job.running:
            self.status.setText(self.not_here() or "Choose a model and press Start; nothing is written until "
                                "you accept.")

    def start(self) -> None:
        model = self.chosen_model()
        images = list(self.scopes.get(self.scope.currentData(), ()))
        if not model:
            self.status.setText("Choose a model first: a downloaded model's name or a model folder.")
            return
        if not images:
            self.status.setText("There are no images to caption: select some in the grid, or choose All images.")
            return
        if self.not_here():
            self.status.setText(self.not_here())
            return
        for key, value in (("model", model), ("prefix", self.prefix.text()), ("blacklist", self.blacklist.text())):
            self.settings.setValue(f"caption/{key}", value)
        if self.python is None:
            self.status.setText("Captioning runs in the training environment, which is not set up yet: set it up "
                                "in Tools → Training Environment, then caption again.")
            return
        self.reject_rows(list(range(len(self.rows))))
        self.warnings = []
        self.status.setToolTip("")
        self.progress.setRange(0, 0)  # busy until the model is loaded
        self.status.setText(f"Loading {model}…")
        self.proposed_by = model
        self.job.start(self.python, self.dataset, model, self.mode.currentData(), images)
        self._running_changed()

    def _started(self, event: dict[str, object]) -> None:
        total = int(str(event.get("total", 0)))
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(0)
        skipped = int(str(event.get("kept", 0)))
        note = f"; {skipped} already have a caption" if skipped else ""
        self.status.setText(f"Captioning {total} images with {event.get('model')} on {event.get('device')} "
                            f"in {event.get('precision')}{note}.")

    def _progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)

    def _finished(self, status: str, message: str) -> None:
        if self.progress.maximum() == 0:
            self.progress.setRange(0, 1)
        texts = {
            "completed": f"Done: {len(self.rows)} captions to review.",
            "stopped": f"Stopped: {len(self.rows)} captions to review; start again for the rest.",
        }
        text = message if status == "failed" or message else texts.get(status, status)
        if self.warnings and status != "failed":  # the images left out stay named once the job is done
            count = len(self.warnings)
            text += (f" 1 problem: {self.warnings[0]}" if count == 1 else
                     f" {count} problems (all in this line's tooltip), the first: {self.warnings[0]}")
            more = f"\n… and {count - 20} more" if count > 20 else ""
            self.status.setToolTip("\n".join(self.warnings[:20]) + more)
        self.status.setText(text)
        self._running_changed()

    def _warned(self, message: str) -> None:
        self.warnings.append(message)
        self.status.setText(message)

    def _running_changed(self) -> None:
        running = self.job.running
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.accept_button.setEnabled(not self.reading)
        self.accept_all_button.setEnabled(not self.reading)

    def has_work(self) -> bool:
        """A job running, or proposals not yet accepted or rejected: a model's work, hours of it on a big dataset."""
        return self.job.running or bool(self.proposals)

    def set_selected(self, selected: Sequence[Path]) -> None:
        """The grid's selection now as "Selected images" (Caption with… pressed again on other images)."""
        self.scopes["Selected images"] = list(selected)
        self.scope.setItemText(self.scope.findData("Selected images"), f"Selected images ({len(selected)})")

    def set_store(self, store: CaptionStore | None) -> None:
        """The Dataset page reads the dataset again (a setting changed): None while it reads, then the new store.
        The job goes on and the proposals stay; those of images no longer in the dataset are dropped."""
        self.reading = store is None
        if store is not None:
            self.store = store
            self.scopes = {"Selected images": [p for p in self.scopes["Selected images"] if p in store.entries],
                           "All images": list(store.entries)}
            for index in range(self.scope.count()):
                name = self.scope.itemData(index)
                self.scope.setItemText(index, f"{name} ({len(self.scopes[name])})")
            self.reject_rows([row for row, image in enumerate(self.rows) if image not in store.entries])
            self._refill_table()
        self._running_changed()

    # ------------------------------------------------------------ proposals

    def add_proposal(self, caption: MachineCaption) -> None:
        """A caption the model proposed for one image of the dataset (others are ignored)."""
        if caption.image not in self.store.entries:
            return
        if caption.image in self.proposals:
            row = self.rows.index(caption.image)  # the same image again (rare): its row is updated
        else:
            row = len(self.rows)
            self.rows.append(caption.image)
            self.table.insertRow(row)
        self.proposals[caption.image] = caption
        self._fill_row(row, self.rules())
        if caption.tags and not self.general.isEnabled():
            self._update_sliders()
        if self.table.currentRow() < 0:
            self.table.setCurrentCell(0, 0)

    def proposed(self, image: Path, rules: CaptionRules | None = None) -> str | None:
        """What accepting would write for `image` now; None when its caption stays as it is."""
        return compose(self.store.caption(image), self.proposals[image], rules or self.rules())

    def _fill_row(self, row: int, rules: CaptionRules) -> None:
        image = self.rows[row]
        after = self.proposed(image, rules)
        tokens = estimate_tokens(after)
        cells = (image.name, self.store.caption(image) or "", after if after is not None else _KEPT,
                 str(tokens) if after is not None else "")
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setToolTip(text)
            if column == 2 and after is None:
                item.setForeground(QBrush(QColor("gray")))
            limit = self.limit
            if column == 3 and tokens > limit:
                item.setForeground(QBrush(QColor("#c0392b")))
                item.setToolTip(f"{tokens} tokens: {self.encoder} reads {limit}; "
                                "the rest is cut off in training")
            self.table.setItem(row, column, item)

    def refresh(self) -> None:
        """Rules changed: the preview is decided again at once, every row once the typing or sliding pauses."""
        rules = self.rules()
        self.general_label.setText(f"General tags ≥ {rules.general_threshold:.2f}")
        self.character_label.setText(f"Character tags ≥ {rules.character_threshold:.2f}")
        self._show_preview()
        self._table_timer.start()

    def _refill_table(self) -> None:
        """Every row again with the rules now, a slice per event-loop turn: 20,000 rows at once froze the dialog
        for seconds after each slider move."""
        self._refilled = 0
        self._refill_some()

    def _refill_some(self) -> None:
        rules, end = self.rules(), min(self._refilled + REFILL_SLICE, len(self.rows))
        for row in range(self._refilled, end):
            self._fill_row(row, rules)
        self._refilled = end
        if end < len(self.rows):
            self._refill_timer.start()

    def _update_sliders(self) -> None:
        tags = any(p.tags for p in self.proposals.values())
        self.general.setEnabled(tags)
        self.character.setEnabled(tags)

    def _show_preview(self) -> None:
        row = self.table.currentRow()
        if not 0 <= row < len(self.rows):
            self.preview_panel.show_image(None)
            return
        image = self.rows[row]
        after = self.proposed(image)
        tokens = estimate_tokens(after if after is not None else self.store.caption(image))
        limit = self.limit
        over = f" — longer than {self.encoder} reads; the rest is cut off" if tokens > limit else ""
        self.preview_panel.show_image(image, after if after is not None else f"{_KEPT}: {self.store.caption(image) or ''}",
                                      f"{tokens} / {limit} tokens{over}")

    def selected_rows(self) -> list[int]:
        return sorted({index.row() for index in self.table.selectionModel().selectedRows()})

    def accept_rows(self, rows: Sequence[int]) -> int:
        """Write the proposals of `rows` as one undo step; returns how many captions change."""
        if self.reading:
            return 0  # the page has no store to take them yet; they stay to be accepted once it has
        rules = self.rules()
        edits = []
        for row in rows:
            image = self.rows[row]
            after = self.proposed(image, rules)
            if after is not None:
                edits.append(CaptionEdit(image, self.store.caption(image), after))
        if edits:
            model = Path(self.proposed_by).name
            title = f"Caption {len(edits)} image{'s' if len(edits) != 1 else ''}"
            self.push_edits(edits, f"{title} with {model}" if model else title)
        self.reject_rows(rows)
        return len(edits)

    def reject_rows(self, rows: Sequence[int]) -> None:
        """Drop the proposals of `rows`; their captions stay as they are."""
        dropped = sorted(set(rows), reverse=True)
        if len(dropped) == len(self.rows):  # every row (Accept all): one call, where 20,000 removals took seconds
            for image in self.rows:
                self.proposals.pop(image, None)
            self.rows = []
            self.table.setRowCount(0)
        for row in dropped if self.rows else ():
            self.proposals.pop(self.rows.pop(row), None)
            self.table.removeRow(row)
        if self._refill_timer.isActive():  # rows moved up past the slices refilled: all again
            self._refill_table()
        self._update_sliders()
        self._show_preview()

    # ------------------------------------------------------------ closing

    def reject(self) -> None:
        """Close, Escape (pressed in a field, to leave it) or the title bar's cross: a job running (an hour on a big
        dataset) is stopped only once the person says so."""
        if self.job.running and not self.confirm_stop():
            return  # still shown: the close event is ignored too
        super().reject()

    def done(self, result: int) -> None:
        self._table_timer.stop()
        self._refill_timer.stop()
        self.job.kill_now()
        self.picker.shutdown()
        self.pictures.shutdown()
        super().done(result)

    def closeEvent(self, event: QCloseEvent) -> None:
        super().closeEvent(event)  # reject() while shown: it may keep a running job and the window
        if event.isAccepted():
            self._table_timer.stop()
            self._refill_timer.stop()
            self.job.kill_now()
            self.picker.shutdown()
            self.pictures.shutdown()
