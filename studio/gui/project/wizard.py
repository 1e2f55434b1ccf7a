"""File → New Project: where the project goes and its images, its base model, a preset that fits.

Every step but the first can be skipped: the project written at the end trains as it
stands (the default base model of its family, the images found in the folders chosen).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
    QWizard,
    QWizardPage,
)

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import ResolvedConfig, resolve_paths
from studio.core.config.files.presets import Preset, apply_preset, list_presets
from studio.core.config.schema import TrainConfig
from studio.core.containment import windows_refusal
from studio.core.dataset.layouts import DatasetError, detect_layout
from studio.core.estimate.estimate import Fit, estimate_vram, fit
from studio.core.estimate.plans.fixes import apply_changes
from studio.core.estimate.plans.preset_estimate import applied_at_its_size
from studio.core.families import DEFAULT_FAMILY
from studio.core.families import title as family_title
from studio.core.hardware.machine.probe import load_hardware
from studio.core.hardware.report import GPUInfo
from studio.core.models.files import ModelFileError, detect_model
from studio.core.models.known import default_base, find_known
from studio.core.project.folder import PROJECT_FILE, Project, config_for_images, create_project, is_project
from studio.gui.base.names import named
from studio.gui.context import StudioContext
from studio.gui.widgets.model_library import ModelLibraryPanel
from studio.gui.widgets.preset_size import ask_size_switch, size_switch

DESCRIBE_AFTER_MS = 400  # the pause in typing the project folder after which its images are counted
FIT_ORDER: dict[Fit, int] = {"fits": 0, "tight": 1, "does_not_fit": 2}
FIT_WORDS: dict[Fit, str] = {"fits": "fits this machine", "tight": "tight on this machine",
                             "does_not_fit": "does not fit this machine"}
# The Model page's wording for a machine without a GPU: a GPU preset plans a run for another machine.
NO_GPU = "no GPU here: CPU (very slow); plan for a GPU profile"
NO_GPU_SUBTITLE = ("No GPU here: training on this machine runs on the CPU (very slow). These presets are for GPUs "
                   "(half precision, 8-bit optimizers): choose one to plan for a machine with a GPU (set the "
                   "GPU profile in Model & Preset → Plan for), or skip to keep settings that run on the CPU.")


def presets_for(config: ResolvedConfig, presets: list[Preset],
                gpu: GPUInfo | None) -> list[tuple[Preset, Fit, float]]:
    """The presets of the config's family with their fit, those that fit this machine first."""
    ranked = []
    for preset in presets:
        if preset.info.family != config.model.family:
            continue
        try:
            estimate = estimate_vram(applied_at_its_size(preset, config), gpu)
        except ConfigError:
            continue
        ranked.append((preset, fit(estimate, gpu), estimate.total_mb))
    return sorted(ranked, key=lambda row: (FIT_ORDER[row[1]], -row[0].info.min_vram_gb))


class ImagesPage(QWizardPage):
    """Step 1: the project's folder and the image folders (the project folder itself by default)."""

    def __init__(self, parent: QWidget | None = None, projects_folder: str = "") -> None:
        super().__init__(parent)
        self.projects_folder = projects_folder  # beside the project open now, where a person keeps their projects
        self.setTitle("Images")
        self.setSubTitle("Choose where the project goes and the folders of images to train on. "
                         "Images stay where they are; nothing in them is moved or changed.")
        self.folder = named(QLineEdit(), "wizard_project_folder")
        # The folder is described (its images counted, subfolders and all) once the typing pauses: not at each
        # key, where "/", "/home" and the home folder would each be read whole on the way to the folder meant.
        self._describe_later = QTimer(self)
        self._describe_later.setSingleShot(True)
        self._describe_later.setInterval(DESCRIBE_AFTER_MS)
        self._describe_later.timeout.connect(self._update)
        self.folder.textChanged.connect(self._typed)
        self.folder.editingFinished.connect(self._update)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_project)
        self.images = named(QListWidget(), "wizard_image_folders")
        add = named(QPushButton("Add image folder…"), "wizard_add_images")
        add.clicked.connect(self._browse_images)
        remove = QPushButton("Remove")
        remove.clicked.connect(self._remove)
        self.layout_label = named(QLabel(), "wizard_layout")
        self.layout_label.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(QLabel("Project folder"))
        top.addWidget(self.folder, 1)
        top.addWidget(browse)
        buttons = QHBoxLayout()
        buttons.addWidget(add)
        buttons.addWidget(remove)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(QLabel("Image folders (none: the images in the project folder)"))
        layout.addWidget(self.images, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.layout_label)

    def _typed_folder(self) -> Path | None:
        text = self.folder.text().strip()
        if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":  # pasted from "Copy as path": quoted
            text = text[1:-1].strip()
        return Path(text).expanduser() if text else None

    def project_root(self) -> Path | None:
        typed = self._typed_folder()
        # A bare name ("cat lora") goes in the home folder, not wherever the studio happened to be started.
        return typed if typed is None or typed.is_absolute() else Path.home() / typed

    def image_folders(self) -> list[Path]:
        return [Path(self.images.item(i).data(Qt.ItemDataRole.UserRole)) for i in range(self.images.count())]

    def add_image_folder(self, folder: Path) -> None:
        item = QListWidgetItem(str(folder))
        item.setData(Qt.ItemDataRole.UserRole, str(folder))
        self.images.addItem(item)
        self._update()

    def _browse_project(self) -> None:
        # The folder typed (or the one it would go in), else beside the open project, else the home folder: not
        # wherever the studio happened to be started.
        typed = self.project_root()
        start = next((str(p) for p in (typed, typed.parent if typed else None) if p is not None and p.is_dir()),
                     self.projects_folder or str(Path.home()))
        folder = QFileDialog.getExistingDirectory(self, "Where the project goes", start)
        if folder:
            self.folder.setText(folder)
            self._update()

    def _browse_images(self) -> None:
        root = self.project_root()  # the images are most often in or beside the project's folder
        start = root if root is not None and root.is_dir() else root.parent if root is not None else None
        folder = QFileDialog.getExistingDirectory(self, "A folder of images", str(start or ""))
        if folder:
            self.add_image_folder(Path(folder))

    def _remove(self) -> None:
        for item in self.images.selectedItems():
            self.images.takeItem(self.images.row(item))
        self._update()

    def existing_project(self) -> str | None:
        """Why the folder chosen cannot take a new project: it is one already (its settings would stay as they
        are, and every choice made in this wizard would be lost), or None."""
        root = self.project_root()
        if root is None:
            return None
        # The folders the studio would make: a project named "aux" is made here, and cannot be copied to Windows
        # (or, made there, is the device).
        for part in (p for p in (root, *root.parents) if not p.exists()):
            why = windows_refusal(part.name)
            if why:
                return f"The folder name {part.name!r} {why}: choose another name for the project's folder."
        if not is_project(root):
            return None
        return (f"{root} is already a studio project (it has {PROJECT_FILE}): open it with File → Open Project, "
                "or choose another folder for the new project.")

    def _typed(self) -> None:
        self.completeChanged.emit()
        self._describe_later.start()

    def _update(self) -> None:
        self._describe_later.stop()
        lines = []
        root = self.project_root()
        existing = self.existing_project()
        if existing is not None:
            self.layout_label.setText(existing)
            self.completeChanged.emit()
            return
        for folder in self.image_folders() or ([root] if root and root.is_dir() else []):
            try:
                lines.append(f"{folder.name or folder}: {detect_layout(folder).describe()}")
            except DatasetError as exc:
                lines.append(str(exc))
        typed = self._typed_folder()
        if root is not None and typed is not None and not typed.is_absolute():
            lines.insert(0, f"The project goes in {root}")
        self.layout_label.setText("\n".join(lines) or "Choose the project folder.")
        self.completeChanged.emit()

    def isComplete(self) -> bool:
        return self.project_root() is not None and self.existing_project() is None


class ModelPage(QWizardPage):
    """Step 2: the base model, from the library, a file or a hub id (default: the family's known base)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTitle("Base model")
        self.setSubTitle("Pick a model on this machine or one to download, or give a file, a folder or a hub id. "
                         "Skip this step to start from Stable Diffusion 1.5.")
        self.family = DEFAULT_FAMILY
        self.base = named(QLineEdit(default_base(DEFAULT_FAMILY)), "wizard_base")
        self.base.editingFinished.connect(lambda: self.choose(self.base.text().strip(), ""))
        pick = QPushButton("File…")
        pick.clicked.connect(self._browse)
        self.family_label = named(QLabel(), "wizard_family")
        self.library = ModelLibraryPanel()
        self.library.sig_chosen.connect(self.choose)
        row = QHBoxLayout()
        row.addWidget(QLabel("Base model"))
        row.addWidget(self.base, 1)
        row.addWidget(pick)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.family_label)
        layout.addWidget(self.library, 1)
        self._show_family()

    def initializePage(self) -> None:
        if not self.library.models and not self.library.scanning:
            self.library.refresh()

    def choose(self, base: str, family: str) -> None:
        """Take a model; its family comes from the library, or from its header or JSON when it is a path."""
        path = Path(base).expanduser()
        if not family and path.exists():
            try:
                family = detect_model(path).family or ""
            except ModelFileError as exc:
                self.family_label.setText(f"✗ {exc}")
                return
        elif not family and (known := find_known(base)) is not None:  # a hub id typed: the studio knows its family
            family = known.family
        self.base.setText(base)
        if family:
            self.family = family
        self._show_family()

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A model file", "", "Models (*.safetensors *.ckpt)")
        if path:
            self.choose(path, "")

    def _show_family(self) -> None:
        self.family_label.setText(f"Family: {family_title(self.family)}")


class PresetPage(QWizardPage):
    """Step 3: a preset of the model's family, those that fit this machine first (skip: the defaults)."""

    def __init__(self, wizard: NewProjectWizard) -> None:
        super().__init__(wizard)
        self.new_project = wizard
        self.setTitle("Preset")
        self.setSubTitle("The presets that fit this machine's GPU come first. Skip to keep the defaults.")
        self.list = named(QListWidget(), "wizard_presets")
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)

    def initializePage(self) -> None:
        self.list.clear()
        try:
            config = self.new_project.resolved_base_config()
        except ConfigError as exc:  # a folder whose name cannot be written into the config
            self.setSubTitle(f"No presets can be estimated: {exc.describe()}")
            return
        except DatasetError as exc:  # a folder the studio may not list (permissions, a drive gone)
            self.setSubTitle(f"No presets can be estimated: {exc}")
            return
        gpu = self.new_project.gpu
        self.setSubTitle(NO_GPU_SUBTITLE if gpu is None else
                         "The presets that fit this machine's GPU come first. Skip to keep the defaults.")
        for preset, verdict, mb in presets_for(config, self.new_project.presets, gpu):
            where = NO_GPU if gpu is None else FIT_WORDS[verdict]
            item = QListWidgetItem(f"{preset.info.title} — {where} (about {mb / 1024:.1f} GB on a GPU)"
                                   if gpu is None else f"{preset.info.title} — {where} (about {mb / 1024:.1f} GB)")
            item.setData(Qt.ItemDataRole.UserRole, preset)
            self.list.addItem(item)

    def chosen(self) -> Preset | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None


class NewProjectWizard(QWizard):
    def __init__(self, context: StudioContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("new_project_wizard")
        self.setWindowTitle("New Project")
        self.setOption(QWizard.WizardOption.HaveFinishButtonOnEarlyPages, True)
        self.project: Project | None = None
        report = load_hardware(context.hardware_file)
        self.gpu = report.gpus[0] if report.gpus else None
        try:
            self.presets = list_presets()
        except ConfigError:
            self.presets = []
        self.images_page = ImagesPage(self, context.projects_folder())
        self.model_page = ModelPage(self)
        self.preset_page = PresetPage(self)
        for page in (self.images_page, self.model_page, self.preset_page):
            page.setFinalPage(True)  # every step after the folder can be skipped
            self.addPage(page)
        self.resize(760, 560)

    def image_folders(self) -> list[Path]:
        """The folders chosen; else the project folder when it holds images; else its (new) images/ folder."""
        root = self.images_page.project_root()
        assert root is not None
        chosen = [f.absolute() for f in self.images_page.image_folders()]
        if chosen:
            return chosen
        if root.is_dir() and detect_layout(root).concepts:
            return [root.absolute()]
        return [root.absolute() / "images"]

    def base_config(self) -> TrainConfig:
        root = self.images_page.project_root()
        assert root is not None
        return config_for_images(root.absolute(), self.image_folders(), self.model_page.family,
                                 self.model_page.base.text().strip() or None)

    def resolved_base_config(self) -> ResolvedConfig:
        """The base config with its paths resolved against the new project's folder (raises ConfigError)."""
        root = self.images_page.project_root()
        assert root is not None
        return resolve_paths(self.base_config(), root.absolute())

    def accept(self) -> None:
        root = self.images_page.project_root()
        if root is None or self.images_page.existing_project() is not None:
            return
        try:
            config = self.base_config()
        except DatasetError as exc:
            self.back_to_images(str(exc))
            return
        preset = self.preset_page.chosen() if self.currentPage() is self.preset_page else None
        if preset is not None:
            try:
                resolved: TrainConfig = self.resolved_base_config()
            except ConfigError:
                resolved = config
            switch = size_switch(preset, config, resolved)
            switched = switch is not None and ask_size_switch(self, preset, switch)
            if switched is None:
                return
            config = apply_preset(config, preset)
            if switch is not None and switched:
                config = apply_changes(config, {"model.base": switch.new_base})
        try:
            for folder in self.image_folders():
                folder.mkdir(parents=True, exist_ok=True)  # a new project's images/ folder, ready to fill
            self.project = create_project(root, config)
        except OSError as exc:  # a read-only folder or drive, a path through a file
            self.back_to_images(f"The project cannot be written in {root} ({exc.strerror or exc}): choose a folder "
                                "you may write to. The images may stay where they are; add their folder below.")
            return
        super().accept()

    def back_to_images(self, why: str) -> None:
        """Say `why` on the first step, where the project's folder is chosen again."""
        while self.currentPage() is not self.images_page and self.currentId() > self.startId():
            self.back()
        self.images_page.layout_label.setText(why)
