"""The caption editor beside the grid: a large preview, the caption with its tags highlighted, next/previous.
For edit pairs (dataset.kind = "edit") the control images stand beside the target and the caption is the
instruction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QImage,
    QKeySequence,
    QPalette,
    QPixmap,
    QShortcut,
    QSyntaxHighlighter,
    QTextCharFormat,
)
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.schema import ModelSection
from studio.core.dataset.captions.caption_tags import estimate_tokens, tag_counts
from studio.core.dataset.scan import ImageEntry
from studio.core.families import DEFAULT_FAMILY, FamilySpec, family, is_family
from studio.gui.base.event_loop import wait_for
from studio.gui.dataset.captions.text import CaptionTextEdit
from studio.gui.dataset.editor.picture_reader import LOADING_TEXT, UNREADABLE_TEXT, PictureReader
from studio.gui.widgets.image_view import ImageView

PREVIEW_SIZE = 768
CAPTION_PLACEHOLDER = "Caption: comma-separated tags or a sentence"
INSTRUCTION_PLACEHOLDER = "Instruction: what to change in the control image (e.g. make it a watercolour)"
TYPING_PAUSE_MS = 500  # a pause this long ends one undoable typing step


class TagHighlighter(QSyntaxHighlighter):
    """Tags in alternating colours so each comma-separated tag reads as one chip.

    The colours follow the editor's background: dark blue and green on a light one, light
    ones on a dark one, so the caption never reads like grey placeholder text.
    """

    LIGHT_BACKGROUND = ("#1d4ed8", "#15803d")
    DARK_BACKGROUND = ("#7fb3ff", "#9be39b")

    def __init__(self, editor: QPlainTextEdit) -> None:
        super().__init__(editor.document())
        dark = editor.palette().color(QPalette.ColorRole.Base).lightness() < 128
        self.colors = self.DARK_BACKGROUND if dark else self.LIGHT_BACKGROUND
        self.formats = []
        for color in self.colors:
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(color))
            self.formats.append(fmt)

    def highlightBlock(self, text: str) -> None:
        start, n = 0, 0
        for i, ch in enumerate(text + ","):
            if ch == ",":
                if text[start:i].strip():
                    self.setFormat(start, i - start, self.formats[n % 2])
                    n += 1
                start = i + 1


class CaptionEditor(QWidget):
    """Shows one image and its caption; reports typing after a pause and asks for next/previous."""

    sig_caption_typed = Signal(object, str)  # image Path, new text
    sig_next = Signal()
    sig_previous = Signal()
    sig_undo = Signal()  # the undo keys in the caption box: the page's undo stack, after pending typing
    sig_redo = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("dataset_editor")
        self.entry: ImageEntry | None = None
        # The loss mask of an image (dataset.masks), set by the page; tinted over the preview.
        self.mask_for: Callable[[Path], QImage | None] = lambda _path: None
        self._tag_counts: Counter[str] = Counter()
        # Whose text encoder reads the captions: its token limit is where the warning starts.
        self.reader: FamilySpec = family(DEFAULT_FAMILY)
        self.use_t5 = False  # SD3's T5 reads longer captions than its CLIP encoders
        self._loading = False
        # The box's text as last loaded or reported: only a change from it is typing. The box cannot hold every
        # caption exactly (a no-break space shows as a space, a Unicode line separator as a new line), so the
        # caption itself is no measure of whether the person typed.
        self._shown = ""
        self.preview = ImageView("No image selected")
        self.preview.setObjectName("dataset_preview")
        self.preview.setMinimumSize(192, 160)
        # Edit pairs: the control images (what the instruction edits) left of the target, in their order.
        self.edit_pairs = False
        self.control_views: list[ImageView] = []
        self.pair_row = QHBoxLayout()
        self.pair_row.addWidget(self.preview, 1)
        self.name = QLabel()
        self.name.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text = CaptionTextEdit()
        self.text.setObjectName("dataset_caption")
        self.text.setPlaceholderText(CAPTION_PLACEHOLDER)
        self.text.setMaximumHeight(120)
        self.highlighter = TagHighlighter(self.text)
        self.tokens = QLabel()
        self.notice = QLabel()
        self.notice.setObjectName("dataset_editor_notice")
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet("color: #e0a030")
        self.prev_button = QPushButton("◀ Previous")
        self.next_button = QPushButton("Next ▶")
        self.prev_button.setToolTip("Previous image (Alt+Left, Ctrl+Up)")
        self.next_button.setToolTip("Next image (Alt+Right, Ctrl+Down)")
        nav = QHBoxLayout()
        nav.addWidget(self.prev_button)
        nav.addWidget(self.tokens, 1, Qt.AlignmentFlag.AlignCenter)
        nav.addWidget(self.next_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.pair_row, 1)
        layout.addWidget(self.name)
        layout.addWidget(self.text)
        layout.addWidget(self.notice)
        layout.addLayout(nav)

        self._pictures = PictureReader(PREVIEW_SIZE, self)  # decoded off the GUI thread: see picture_reader.py
        self._pause = QTimer(self, singleShot=True, interval=TYPING_PAUSE_MS)
        self._pause.timeout.connect(self.commit)
        self.text.textChanged.connect(self._typed)
        self.text.sig_undo.connect(self._undo)
        self.text.sig_redo.connect(self._redo)
        self.prev_button.clicked.connect(self._previous)
        self.next_button.clicked.connect(self._next)
        context = Qt.ShortcutContext.WidgetWithChildrenShortcut
        for keys, slot in (("Alt+Right", self._next), ("Ctrl+Down", self._next),
                           ("Alt+Left", self._previous), ("Ctrl+Up", self._previous)):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(context)
            shortcut.activated.connect(slot)
        self.set_entry(None)

    def set_entry(self, entry: ImageEntry | None, refusal: str | None = None,
                  empty_text: str = "No image selected") -> None:
        """Show an image; `refusal` says why its caption cannot be edited (read-only folder);
        `empty_text` is shown when there is no image."""
        self.commit()
        self.entry = entry
        self._loading = True
        self.text.setPlainText("" if entry is None else entry.caption or "")
        self._shown = self.text.toPlainText()
        self.text.move_caret_to_end()  # a person adds to a caption far more often than they prepend
        self._loading = False
        self.text.setReadOnly(entry is None or refusal is not None)
        self._offer_tags()
        self.notice.setText(f"Editing refused: {refusal}" if refusal else "")
        self._update_tokens()
        self._show_controls(entry)
        if entry is None:
            self._pictures.cancel()
            self.preview.set_text(empty_text)
            self.name.setText("")
            return
        if self.edit_pairs:
            sources = ", ".join(c.name for c in entry.controls) or "no control image"
            self.name.setText(f"{sources} → {entry.path.name}  ·  instruction from {entry.caption_source}")
        else:
            self.name.setText(f"{entry.path.name}  ·  caption from {entry.caption_source}")
        self._ask_pictures(entry)

    def set_edit_pairs(self, on: bool) -> None:
        """Show items as edit pairs (controls beside the target, the caption as the instruction) or as images."""
        self.edit_pairs = on
        self.text.setPlaceholderText(INSTRUCTION_PLACEHOLDER if on else CAPTION_PLACEHOLDER)
        self._show_controls(self.entry)
        if self.entry is not None:
            self._ask_pictures(self.entry)

    def _show_controls(self, entry: ImageEntry | None) -> None:
        controls = entry.controls if entry is not None and self.edit_pairs else ()
        shown = max(len(controls), 1) if self.edit_pairs and entry is not None else 0
        while len(self.control_views) < shown:
            view = ImageView()
            view.setObjectName(f"dataset_control_{len(self.control_views)}")
            view.setMinimumSize(96, 96)
            self.pair_row.insertWidget(len(self.control_views), view, 1)
            self.control_views.append(view)
        for index, view in enumerate(self.control_views):
            view.setVisible(index < shown)
            if index >= shown:
                view.set_pixmap(None)  # a hidden view holds no picture of an earlier pair
                continue
            if not controls:
                view.set_text("No control image for this target: the Problems tab says where it goes")
                view.setToolTip("")
                continue
            view.set_text(LOADING_TEXT)  # the picture comes with the target's (_pictures_read)
            view.setToolTip(f"Control image {index + 1}: {controls[index]}")

    def _ask_pictures(self, entry: ImageEntry) -> None:
        """Read the preview (with its loss mask) and an edit pair's controls off the GUI thread."""
        self.preview.set_text(LOADING_TEXT)
        controls = list(entry.controls) if self.edit_pairs else []
        self._pictures.ask([entry.path, *controls], lambda pictures: self._pictures_read(entry, pictures),
                           self.mask_for)

    def _pictures_read(self, entry: ImageEntry, pictures: list[QImage | None]) -> None:
        if entry is not self.entry:
            return
        target, *controls = pictures
        if target is None:
            self.preview.set_text(UNREADABLE_TEXT)
        else:
            self.preview.set_pixmap(QPixmap.fromImage(target))
        for view, path, picture in zip(self.control_views, entry.controls, controls, strict=False):
            if picture is None:
                view.set_text(f"{path.name} cannot be previewed (unreadable or too large)")
            else:
                view.set_pixmap(QPixmap.fromImage(picture))

    def wait_preview(self, timeout_s: float = 10.0) -> bool:
        """Wait until the pictures of the image shown are read and shown (tests, screenshots)."""
        return wait_for(lambda: not self._pictures.busy, timeout_s)

    def shutdown(self) -> None:
        self._pictures.shutdown()

    def set_family(self, model: ModelSection) -> None:
        """Warn at the caption length the project's family reads (75 CLIP tokens for SD1.x and SDXL, and SD3
        without T5, 512 Qwen3 tokens for FLUX.2 [klein] and Z-Image); an unknown family keeps the last one."""
        if is_family(model.family) and (model.family, model.use_t5) != (self.reader.name, self.use_t5):
            self.reader, self.use_t5 = family(model.family), model.use_t5
            self._update_tokens()

    def set_tags(self, counts: Counter[str]) -> None:
        """The dataset's tags (tag -> captions holding it), offered as the caption is typed: those of
        the other captions, most frequent first. This caption's own words, a half-typed one saved
        on a pause among them, are not offered back."""
        self._tag_counts = counts
        self._offer_tags()

    def _offer_tags(self) -> None:
        # The counts are of the saved captions; this one's is what the box holds (saved on each pause).
        own = tag_counts([self.text.toPlainText()]) if self.entry is not None else Counter()
        others = self._tag_counts - own
        self.text.set_tags([tag for tag, _ in others.most_common()])

    def show_caption(self, text: str | None) -> None:
        """Replace the text after an undo or a bulk edit without reporting it as typing."""
        if self.text.toPlainText().strip() == (text or "").strip():
            return  # keeps a trailing space being typed
        self._pause.stop()
        self._loading = True
        cursor = self.text.textCursor().position()
        self.text.setPlainText(text or "")
        self._shown = self.text.toPlainText()
        c = self.text.textCursor()
        c.setPosition(min(cursor, len(text or "")))
        self.text.setTextCursor(c)
        self._loading = False
        self._update_tokens()

    def commit(self) -> None:
        """Report pending typing now (before navigation, saving or closing)."""
        self._pause.stop()
        if self.entry is None or self.text.isReadOnly():
            return
        shown = self.text.toPlainText()
        text = shown.strip()
        if shown != self._shown and text != (self.entry.caption or "").strip():
            self._shown = shown
            self.sig_caption_typed.emit(self.entry.path, text)

    def _typed(self) -> None:
        if not self._loading:
            self._pause.start()
            self._update_tokens()

    def _update_tokens(self) -> None:
        tokens = estimate_tokens(self.text.toPlainText())
        limit, encoder = self.reader.text_reader(self.use_t5)
        over = tokens > limit
        self.tokens.setText(f"≈ {tokens} tokens" + (f" (over {limit}: {encoder} reads {limit}, the rest is ignored)"
                                                     if over else ""))
        self.tokens.setStyleSheet("color: #e05050" if over else "")

    def _undo(self) -> None:
        self.commit()  # typing not yet reported becomes the step that is undone
        self.sig_undo.emit()

    def _redo(self) -> None:
        self.commit()
        self.sig_redo.emit()

    def _next(self) -> None:
        self.commit()
        self.sig_next.emit()

    def _previous(self) -> None:
        self.commit()
        self.sig_previous.emit()
