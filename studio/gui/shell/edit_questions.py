"""The window's questions about edits not in the project's studio.toml (the TOML being edited, values the
form refused): read the file again over them, or let them go when the project is left or the window closes."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget

from studio.gui.base.questions import confirm


def ask_reload(parent: QWidget, pending: str) -> bool:
    """studio.toml changed on disk while edits here are not in it: read it again (True) or keep them."""
    box = QMessageBox(QMessageBox.Icon.Question, "studio.toml changed on disk",
                      f"The project's studio.toml was changed by another program, but there are edits here "
                      f"that are not in it ({pending}).\n\nRead the file again (your edits here are lost), "
                      "or keep your edits (they are saved over the file at your next change)?", parent=parent)
    reload = box.addButton("Read the file again", QMessageBox.ButtonRole.DestructiveRole)
    box.addButton("Keep my edits", QMessageBox.ButtonRole.RejectRole)
    box.exec()
    return box.clickedButton() is reload


def ask_drop_edits(parent: QWidget, pending: list[str], doing: str) -> bool:
    """`doing` (leaving the project, closing the window) loses the edits and work `pending`: True when the person
    lets them go, False on Cancel."""
    return confirm(parent, "Edits not saved",
                   f"There is work here that is not saved in the project ({'; '.join(pending)})."
                   f"\n\n{doing} and lose it? (Cancel: go back to it; Apply in the TOML window, correct the "
                   "values the form refused, or accept or reject the captions a model proposed, to keep it.)",
                   "Discard my edits")
