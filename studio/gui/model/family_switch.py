"""Another family chosen on the Model page while the base model is of the old one (an SDXL folder when the
family becomes Z-Image): the page asks whether the base follows, as a preset made for another size does
(widgets/preset_size.py), instead of keeping a model that the new family cannot train."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QMessageBox, QWidget

from studio.core.families import title as family_title
from studio.core.models.files import ModelInfo
from studio.core.models.known import default_base, find_known
from studio.core.models.library import LibraryModel
from studio.gui.model.base_check import BaseModelCheck


def base_family(check: BaseModelCheck, path: Path, base: str, library: list[LibraryModel]) -> str | None:
    """The family the base model is: read from its folder or file, a known hub id's, or the library's."""
    info = check.info(path)
    if isinstance(info, ModelInfo):
        return info.family
    known = find_known(base)
    if known is not None:
        return known.family
    return next((m.family for m in library if m.base == base and m.family), None)


def offered_base(family: str, library: list[LibraryModel]) -> tuple[str, str]:
    """(the base to offer for `family`, where it is in words): a model of it on this machine first, else its
    default hub model."""
    mine = next((m for m in library if m.family == family and m.trainable), None)
    if mine is not None:
        return mine.base, f"on this machine ({mine.place})"
    return default_base(family), f"the {family_title(family)} default, downloaded from the list below"


def ask_family_base(parent: QWidget, base: str, base_family: str, family: str, offer: tuple[str, str]) -> bool | None:
    """True: the base becomes the offered one; False: keep it; None: stay on the old family."""
    name, old = family_title(family), family_title(base_family)
    shown = Path(base).name if Path(base).is_absolute() else base
    new_base, where = offer
    text = (f"The base model {shown} is {_a(old)} model; {name} trains from {name} models.\n\n"
            f"Yes: the base model becomes {new_base} ({where}).\n"
            f"No: keep {shown} (Train refuses it until {_a(name)} model is chosen).\n"
            f"Cancel: stay on {old}.")
    buttons = (QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No
               | QMessageBox.StandardButton.Cancel)
    answer = QMessageBox.question(parent, f"Train {_a(name)} model?", text, buttons, QMessageBox.StandardButton.Yes)
    if answer == QMessageBox.StandardButton.Cancel:
        return None
    return answer == QMessageBox.StandardButton.Yes


def _a(title: str) -> str:
    """The title with its article, as it is read aloud: "an SDXL", "a Z-Image"."""
    return ("an " if title.startswith(("SD", "A", "E", "I", "O", "U")) else "a ") + title
