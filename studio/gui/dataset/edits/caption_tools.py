"""Edits of many captions at once on the Dataset page: the bulk operations (with their dialog or
without it) and captioning by a model with its review. What they change lands as one undo step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from PySide6.QtWidgets import QWidget

from studio.core.dataset.captions.caption_store import CaptionEdit, CaptionStore
from studio.core.dataset.scan import ImageEntry
from studio.gui.context import StudioContext
from studio.gui.dataset.editor.editor import CaptionEditor
from studio.gui.dataset.edits.bulk import BULK_OPS, BulkDialog
from studio.gui.dataset.grid.grid_model import DatasetListModel

if TYPE_CHECKING:  # loaded when Caption with… first opens, not before the window's first paint
    from studio.gui.dataset.captions.review import CaptionReviewDialog


class CaptionPage(Protocol):
    """What of the Dataset page the caption tools use."""

    context: StudioContext
    store: CaptionStore | None
    model: DatasetListModel
    editor: CaptionEditor

    def selected_entries(self) -> list[ImageEntry]: ...
    def push_edits(self, edits: list[CaptionEdit], title: str) -> None: ...


class CaptionTools:
    def __init__(self, page: CaptionPage, parent: QWidget) -> None:
        self.page, self.parent = page, parent
        self.dialog: CaptionReviewDialog | None = None
        # A model's captioning (an hour of it on a big dataset) ends with the project or the window: asked first.
        page.context.unsaved_work.append(self.unreviewed)

    def unreviewed(self) -> str:
        """The captioning that leaving the project would end, in words ("" for none)."""
        dialog = self.dialog
        if dialog is None or not dialog.has_work():
            return ""
        count = len(dialog.proposals)
        proposed = f"{count} caption{'s' if count != 1 else ''} a model proposed, not yet accepted or rejected"
        return ("captioning by a model still running" + (f" ({proposed})" if count else "")) if dialog.job.running \
            else proposed

    def scopes(self) -> dict[str, Mapping[Path, str | None]]:
        page = self.page
        if page.store is None:
            return {}
        shown = [page.model.entry(r).path for r in range(page.model.rowCount())]
        return {
            "Selected images": page.store.captions(e.path for e in page.selected_entries()),
            "Images shown": page.store.captions(shown),
            "All images": page.store.captions(),
        }

    def apply_bulk(self, key: str, first: str = "", second: str = "", scope: str = "All images",
                   regex: bool = False, case_sensitive: bool = True) -> int:
        """Run a bulk operation without the dialog; returns how many captions changed."""
        self.page.editor.commit()
        edits = BULK_OPS[key].run(self.scopes()[scope], first, second, regex, case_sensitive)
        self.page.push_edits(edits, BULK_OPS[key].title)
        return len(edits)

    def open_bulk_dialog(self) -> None:
        self.page.editor.commit()
        if self.page.store is None:
            return
        dialog = BulkDialog(self.scopes(), self.parent)
        if dialog.exec() and dialog.edits:
            self.page.push_edits(dialog.edits, dialog.operation.currentText())
        dialog.deleteLater()  # with its worker thread and its copy of the captions

    def open_caption_dialog(self) -> CaptionReviewDialog | None:
        """Caption with…: a model in another process proposes captions; what is accepted is one undo step."""
        page = self.page
        page.editor.commit()
        if self.dialog is not None and self.dialog.has_work():
            # Its job and proposals stay: the window comes to the front, captioning the grid's selection next.
            self.dialog.set_selected([e.path for e in page.selected_entries()])
            self.dialog.show()
            self.dialog.raise_()
            self.dialog.activateWindow()
            return self.dialog
        self.close_caption_dialog()
        if page.store is not None and page.context.project is not None:
            selected = [e.path for e in page.selected_entries()]
            push: Callable[[list[CaptionEdit], str], None] = page.push_edits
            from studio.gui.dataset.captions.review import CaptionReviewDialog

            self.dialog = CaptionReviewDialog(page.store, selected, push, page.context, self.parent)
            self.dialog.show()
        return self.dialog

    def store_replaced(self, store: CaptionStore | None, root: Path | None) -> None:
        """The page reads the dataset of the project at `root` again (None: no project): Caption with… goes on
        with the new store (None while it is read); another project's dataset closes it."""
        if self.dialog is None:
            return
        if root is None or self.dialog.dataset != root:
            self.close_caption_dialog()
        else:
            self.dialog.set_store(store)

    def close_caption_dialog(self) -> None:
        if self.dialog is not None:
            self.dialog.done(0)  # not close(): the window or the project closing ends the job unasked
            self.dialog.deleteLater()
            self.dialog = None
