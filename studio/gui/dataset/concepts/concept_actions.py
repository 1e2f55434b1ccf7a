"""What the Concepts tab does to the project: folders added and removed, a concept's settings,
repeats (a kohya folder is renamed after asking, and the rename can be undone).

A concept whose own folder is a kohya "N_name" folder is renamed too when its repeats change, and
its path in studio.toml follows: kohya's scripts read the repeats from the folder's name, so a
folder left at 3_name with `repeats = 5` would train x3 there and x5 here."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget

from studio.core.config.errors import ConfigIssue
from studio.core.config.schema import TrainConfig
from studio.core.dataset.layouts import DatasetError, detect_layout, kohya_folder, rename_repeat_folder
from studio.core.project.folder import concept_path, concepts_from_layouts
from studio.gui.context import StudioContext
from studio.gui.dataset.concepts.panels import ConceptsPanel

PATH_KEYS = ("path", "class_path")
# Concept settings the scan of the images does not read: changing them does not read the folders again.
NOT_SCANNED = ("class_prompt", "class_path", "num_class_images", "prior_loss_weight")



def scan_key(config: TrainConfig) -> str:
    """What the scan and check of the images depend on; a change of anything else does not read them again.
    The family and its T5 are among them: its text encoders decide which captions are too long."""
    data = config.dataset.model_dump()
    for concept in data["concepts"]:
        for key in NOT_SCANNED:
            concept.pop(key, None)
    return json.dumps({**data, "family": config.model.family, "use_t5": config.model.use_t5}, sort_keys=True,
                      default=str)

class DatasetView(Protocol):
    """What of the Dataset page the concept actions use."""

    context: StudioContext
    concepts_panel: ConceptsPanel
    status_label: QLabel

    def save_now(self) -> bool: ...
    def reload(self) -> None: ...
    def reload_rows(self) -> None: ...


class ConceptActions(QObject):
    def __init__(self, page: DatasetView) -> None:
        super().__init__(page if isinstance(page, QWidget) else None)
        self.page = page
        self.context = page.context
        # Asked before a kohya folder is renamed; tests replace it.
        self.confirm: Callable[[str, str], bool] = self._confirm_dialog
        self.last_rename: tuple[Path, Path] | None = None  # (renamed folder, its name before)
        self._renamed_concept: int | None = None  # the concept whose own folder that was
        panel = page.concepts_panel
        panel.sig_repeats_changed.connect(self.repeats_changed)
        panel.sig_add_folder.connect(self.add_folder)
        panel.sig_remove.connect(self.remove)
        panel.details.sig_edited.connect(self.edit)
        panel.undo_rename.clicked.connect(self.undo_rename)
        # The rename offered for undo is the project's before: another project's concepts are not its.
        self.context.sig_project_changed.connect(self._forget_rename)

    def _concepts(self) -> list[dict[str, Any]]:
        config = self.context.config
        return [c.model_dump() for c in config.dataset.concepts] if config is not None else []

    def _save(self, concepts: list[dict[str, Any]]) -> list[ConfigIssue]:
        issues = self.context.change_config({"dataset.concepts": concepts})
        self.page.concepts_panel.details.show_issues(issues)
        return issues

    def add_folder(self, folder: Path) -> list[ConfigIssue]:
        """A folder of images becomes concepts as its layout says (kohya N_name folders keep their repeats)."""
        project = self.context.project
        if project is None:
            return []
        try:
            found = concepts_from_layouts([detect_layout(folder)], project.root)
        except DatasetError as exc:
            self.page.status_label.setText(str(exc))
            return []
        known = {c["path"] for c in self._concepts()}
        added = [c.model_dump() for c in found if c.path not in known]
        if not found:
            added = [{"path": concept_path(folder, project.root)}]
        if not added:
            self.page.status_label.setText(f"{folder} is already in the dataset.")
            return []
        issues = self._save(self._concepts() + added)
        if not issues:
            self.context.status(f"Added {', '.join(c['path'] for c in added)} to the dataset")
        return issues

    def remove(self, index: int) -> list[ConfigIssue]:
        concepts = self._concepts()
        if not 0 <= index < len(concepts):
            return []
        removed = concepts.pop(index)
        issues = self._save(concepts)
        if not issues:
            self.context.status(f"{removed['path']} is no longer trained on; its images stay where they are")
        return issues

    def edit(self, index: int, changes: dict[str, Any]) -> list[ConfigIssue]:
        concepts = self._concepts()
        project = self.context.project
        if not 0 <= index < len(concepts) or project is None:
            return []
        for key in PATH_KEYS:
            value = changes.get(key)
            if isinstance(value, str) and Path(value).is_absolute():
                changes[key] = concept_path(Path(value), project.root)
        concepts[index].update(changes)
        return self._save(concepts)

    # ------------------------------------------------------------ repeats and kohya folders

    def repeats_changed(self, index: int, kohya: Path | None, repeats: int) -> None:
        if kohya is None:
            concepts = self._concepts()
            if not 0 <= index < len(concepts):
                return
            own = self._kohya_concept_folder(concepts[index])
            if own is None:
                concepts[index]["repeats"] = repeats
                self._save(concepts)
                return
            kohya, concept = own, index
        else:
            concept = None
        new_name = f"{repeats}_{kohya.name.split('_', 1)[-1]}"
        if not self.confirm("Rename the folder?",
                            f"The repeats of a kohya folder are part of its name: rename\n\n{kohya}\n\nto "
                            f"{new_name}?\n\nThe images and captions in it stay as they are; the rename can be "
                            "undone with the button on this tab."):
            self.page.reload_rows()  # the spin box goes back to the folder's number
            return
        self.rename(kohya, repeats, concept=concept)

    def _kohya_concept_folder(self, concept: dict[str, Any]) -> Path | None:
        """The concept's own folder when it is named like a kohya repeat folder (N_name), else None."""
        project = self.context.project
        if project is None or not isinstance(concept.get("path"), str):
            return None
        folder = project.resolve(concept["path"])
        return folder if kohya_folder(folder.name) is not None and folder.is_dir() else None

    def rename(self, folder: Path, repeats: int, offer_undo: bool = True, concept: int | None = None) -> Path | None:
        """Rename a kohya folder to `repeats`; with `concept`, that concept's path and repeats in
        studio.toml follow (the folder is renamed back when they cannot be saved)."""
        if not self.page.save_now():
            self.page.status_label.setText("Save or resolve the pending captions before renaming folders.")
            return None
        try:
            target = rename_repeat_folder(folder, repeats)
        except DatasetError as exc:
            self.page.status_label.setText(str(exc))
            return None
        if target == folder:
            return target
        before = kohya_folder(folder.name)
        if concept is not None and before is not None and not self._follow_rename(concept, target, repeats):
            rename_repeat_folder(target, before[0])  # studio.toml refused the new path: as it was
            self.page.reload_rows()
            return None
        button = self.page.concepts_panel.undo_rename
        if offer_undo:
            self.last_rename, self._renamed_concept = (target, folder), concept
            button.setText(f"Undo: rename {target.name} back to {folder.name}")
        button.setVisible(offer_undo)
        self.context.status(f"Renamed {folder.name} to {target.name}.")
        self.page.reload()
        return target

    def undo_rename(self) -> Path | None:
        if self.last_rename is None:
            return None
        current, before = self.last_rename
        parsed = kohya_folder(before.name)
        self.last_rename = None
        self.page.concepts_panel.undo_rename.setVisible(False)
        return self.rename(current, parsed[0], offer_undo=False, concept=self._renamed_concept) if parsed else None

    def _forget_rename(self, _project: object) -> None:
        self.last_rename = self._renamed_concept = None
        self.page.concepts_panel.undo_rename.setVisible(False)

    def _follow_rename(self, index: int, target: Path, repeats: int) -> bool:
        """The concept's path and repeats after its folder was renamed; False when they cannot be saved."""
        concepts = self._concepts()
        project = self.context.project
        if not 0 <= index < len(concepts) or project is None:
            return False
        concepts[index]["path"] = concept_path(target, project.root)
        concepts[index]["repeats"] = repeats
        return not self._save(concepts)

    def _confirm_dialog(self, title: str, text: str) -> bool:
        parent = self.page if isinstance(self.page, QWidget) else None
        return QMessageBox.question(parent, title, text) == QMessageBox.StandardButton.Yes
