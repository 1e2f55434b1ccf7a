"""Undo steps of the Dataset page: each wraps the core's caption edits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtGui import QUndoCommand

from studio.core.dataset.captions.caption_store import CaptionEdit, CaptionStore

TYPING_ID = 1001


class CaptionCommand(QUndoCommand):
    """A list of caption edits as one undoable step; `changed` is told which images changed."""

    def __init__(self, store: CaptionStore, edits: Sequence[CaptionEdit], text: str,
                 changed: Callable[[list[Path]], None], typing: bool = False) -> None:
        super().__init__(text)
        self.store = store
        self.edits = list(edits)
        self.changed = changed
        self.typing = typing

    def redo(self) -> None:
        edits = [e for e in self.edits if self.store.caption(e.image) == e.before]
        self.store.apply(edits)
        self.changed([e.image for e in edits])

    def undo(self) -> None:
        # Only captions still as this step left them: one whose text another program wrote was taken instead (a
        # conflict answered "Use the text on disk") is no longer the person's edit, and stays as it is.
        edits = [e for e in self.edits if self.store.caption(e.image) == e.after]
        self.store.revert(edits)
        self.changed([e.image for e in edits])

    def id(self) -> int:
        return TYPING_ID if self.typing else -1

    def mergeWith(self, other: QUndoCommand) -> bool:
        """Typing pauses on the same image make one step, so undo takes back the whole sentence."""
        if not isinstance(other, CaptionCommand) or not (self.typing and other.typing):
            return False
        if len(self.edits) != 1 or len(other.edits) != 1 or self.edits[0].image != other.edits[0].image:
            return False
        self.edits = [CaptionEdit(self.edits[0].image, self.edits[0].before, other.edits[0].after)]
        return True
