"""The main window: navigation of pages, menus, status bar, projects and recent projects."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
    QWizard,
)

from studio import __version__
from studio.core.resources import app_root
from studio.core.training_python import needs_training_env
from studio.gui.context import StudioContext
from studio.gui.page import Page
from studio.gui.shell.demo_banner import DemoBanner
from studio.gui.shell.demo_model import DemoModel
from studio.gui.shell.edit_questions import ask_drop_edits, ask_reload
from studio.gui.shell.recent_projects import RecentProjects
from studio.gui.widgets.elided_label import ElidedLabel

# Loaded when first used, not before the first paint: the project folder and the demo (pydantic with
# the config schema), the Tools menu's window.
if TYPE_CHECKING:
    from studio.core.project.folder import Project
    from studio.gui.trainenv.window import TrainingEnvDialog


@dataclass(frozen=True)
class PageSpec:
    title: str
    page_id: str
    module: str
    cls: str
    takes_run_controller: bool = False  # handed the context's RunController (Train, Runs)

    def build(self, context: StudioContext) -> Page:
        page_class: Callable[..., Page] = getattr(importlib.import_module(self.module), self.cls)
        if self.takes_run_controller:
            return page_class(context, context.run_controller)
        return page_class(context)


# Pages are imported and built when first needed: the shown one right after the first paint (and
# after the start project is read), then the others, so the window appears before pyqtgraph, the
# pages' models and the config schema load.
PAGES: tuple[PageSpec, ...] = (
    PageSpec("Dataset", "page_dataset", "studio.gui.dataset.page", "DatasetPage"),
    PageSpec("Model & Preset", "page_model", "studio.gui.model.page", "ModelPage"),
    PageSpec("Train", "page_train", "studio.gui.training.page", "TrainPage", takes_run_controller=True),
    PageSpec("Runs", "page_runs", "studio.gui.runs.page", "RunsPage", takes_run_controller=True),
    PageSpec("Export", "page_export", "studio.gui.export.page", "ExportPage"),
)
# The other pages are built once the shown one has filled in, or after this long at most.
BUSY_WAIT_S = 5.0
BUSY_POLL_MS = 30
LOADING_PROJECT = "Loading project…"
DOCS_URL = "docs/index.md"
PROJECT_PATH_WIDTH = 360  # px of the status bar for the project path


class MainWindow(QMainWindow):
    sig_first_paint = Signal()

    def __init__(self, context: StudioContext) -> None:
        super().__init__()
        self.context = context
        self.setObjectName("main_window")
        self.setMinimumSize(QSize(960, 640))
        self._painted = False
        self._restoring = False  # the page restored at start is built after the first paint
        self._start_project: Callable[[], object] | None = None
        self._busy_since: float | None = None  # when the remaining pages began to wait for the shown one

        self.nav = QListWidget()
        self.nav.setObjectName("navigation")
        self.nav.setFixedWidth(180)
        self.stack = QStackedWidget()
        self._built: dict[int, Page] = {}
        for spec in PAGES:
            self.stack.addWidget(_stand_in())  # until the page is built
            item = QListWidgetItem(spec.title)
            item.setData(Qt.ItemDataRole.UserRole, spec.page_id)
            item.setSizeHint(QSize(160, 40))
            self.nav.addItem(item)
        self.nav.currentRowChanged.connect(self._show_row)

        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        self.demo_banner = DemoBanner(context.settings)
        self.demo_banner.sig_go_train.connect(lambda: self.show_page("page_train"))
        self.demo_model = DemoModel(context, self.demo_banner, self)
        pages = QVBoxLayout()
        pages.setContentsMargins(0, 0, 0, 0)
        pages.addWidget(self.demo_banner)
        pages.addWidget(self.stack, 1)
        layout.addWidget(self.nav)
        layout.addLayout(pages, 1)
        self.setCentralWidget(central)

        self.project_label = ElidedLabel(PROJECT_PATH_WIDTH)  # the messages beside it keep their room
        self.statusBar().addPermanentWidget(self.project_label)
        context.sig_status.connect(lambda text: self.statusBar().showMessage(text, 8000))
        context.sig_project_changed.connect(self._on_project_changed)
        context.sig_config_changed.connect(lambda _config: self._show_demo_banner())
        context.confirm_reload = self.confirm_reload
        context.sig_demo_model_wanted.connect(self.demo_model.build)
        self._build_menus()
        self._restore_geometry()

    # ------------------------------------------------------------ menus

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        new_action = _action("&New Project…", self, QKeySequence.StandardKey.New)
        new_action.triggered.connect(self.new_project_dialog)
        open_action = _action("&Open Project…", self, QKeySequence.StandardKey.Open)
        open_action.triggered.connect(self.open_project_dialog)
        demo_action = QAction("Open &Demo Project", self)
        demo_action.triggered.connect(self.open_demo_project)
        self.recent = RecentProjects(self.context.settings, self, self.open_project_path)
        self.recent_menu = self.recent.menu
        quit_action = _action("&Quit", self, QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addActions([new_action, open_action, demo_action])
        file_menu.addMenu(self.recent_menu)
        file_menu.addSeparator()
        file_menu.addAction(quit_action)

        go_menu = self.menuBar().addMenu("&Go")
        for index, spec in enumerate(PAGES):
            # "&&": a menu reads one "&" as the mark of a shortcut letter ("Model _Preset").
            action = _action(spec.title.replace("&", "&&"), self, QKeySequence(f"Ctrl+{index + 1}"))
            action.triggered.connect(lambda _checked=False, i=index: self.nav.setCurrentRow(i))
            go_menu.addAction(action)

        tools_menu = self.menuBar().addMenu("&Tools")
        env_action = QAction("&Training Environment…", self)
        env_action.setObjectName("action_training_env")
        env_action.triggered.connect(self.open_training_env)
        tools_menu.addAction(env_action)

        help_menu = self.menuBar().addMenu("&Help")
        docs_action = _action("&Documentation", self, QKeySequence.StandardKey.HelpContents)
        docs_action.triggered.connect(self.open_documentation)
        about_action = QAction("&About", self)
        about_action.triggered.connect(self.show_about)
        help_menu.addActions([docs_action, about_action])

    # ------------------------------------------------------------ projects

    def recent_projects(self) -> list[str]:
        return self.recent.paths()

    def set_project(self, project: Project) -> None:
        self.context.set_project(project)
        self.recent.remember(str(project.root))

    def open_project_path(self, path: str | Path) -> bool:
        from studio.core.dataset.layouts import DatasetError, detect_layout
        from studio.core.project.folder import PROJECT_FILE, create_project, is_project, open_project

        folder = Path(path)
        if folder.name == PROJECT_FILE and folder.is_file():  # the project's file given (a double-click, a command)
            folder = folder.parent
        if not folder.is_dir():
            gone = f"The folder {folder} does not exist any more (deleted, moved, or on a drive not connected)."
            if str(folder) not in self.recent_projects():
                QMessageBox.warning(self, "Open project", gone)
                return False
            # A recent project: kept on the list for a drive plugged in later, or taken off it.
            answer = QMessageBox.question(self, "Open project", f"{gone}\n\nRemove it from the recent projects?")
            if answer == QMessageBox.StandardButton.Yes:
                self.recent.forget(str(folder))
            return False
        if not self.may_drop_edits("Open another project"):
            return False
        if not is_project(folder):
            try:
                found = detect_layout(folder).describe()
            except DatasetError as exc:
                QMessageBox.warning(self, "Open project", str(exc))
                return False
            answer = QMessageBox.question(
                self,
                "Create a project here?",
                f"{folder} is not a studio project yet (it has no studio.toml).\n\nFound: {found}.\n\n"
                "Create a project in this folder? Your images and captions stay as they are; the studio adds "
                "studio.toml and a runs folder.",
            )
            if answer != QMessageBox.StandardButton.Yes:
                return False
            try:
                created = create_project(folder)
            except OSError as exc:  # a read-only folder: a card, a share, a disc
                QMessageBox.warning(self, "Open project", f"No project can be made in {folder}: "
                                    f"{exc.strerror or exc}.\n\nMake a project in a folder you may write to with "
                                    "File → New Project, and add this folder as its images there; they stay "
                                    "where they are.")
                return False
            self.set_project(created)
            return True
        project = open_project(folder)
        self.set_project(project)
        if self.demo_model.needs_building(project) and not needs_training_env(None):
            self.demo_model.build(project)  # the demo reopened as a recent project, its model not built yet
        return True

    def open_project_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open project folder", self.context.projects_folder())
        if folder:
            self.open_project_path(folder)

    def new_project_wizard(self) -> QWizard:
        """File → New Project: images, base model, preset (studio/gui/project/wizard.py)."""
        # Loaded by name, like the pages: the window's root modules do not import feature folders.
        wizard: QWizard = importlib.import_module("studio.gui.project.wizard").NewProjectWizard(self.context, self)
        wizard.accepted.connect(lambda: self._wizard_done(wizard))
        return wizard

    def new_project_dialog(self) -> None:
        if self.may_drop_edits("Make a new project"):
            self.new_project_wizard().open()

    def _wizard_done(self, wizard: QWizard) -> None:
        from studio.core.project.folder import Project

        project = getattr(wizard, "project", None)
        if isinstance(project, Project):
            self.set_project(project)

    def open_demo_project(self) -> None:
        from studio.core.project.demo import create_demo_project

        if not self.may_drop_edits("Open the demo project"):
            return
        project = create_demo_project()
        self.set_project(project)
        self.demo_model.build(project)

    def open_training_env(self) -> TrainingEnvDialog:
        """Tools → Training Environment; once it is ready, an open demo gets its model."""
        from studio.gui.trainenv.window import open_training_env_dialog

        dialog = open_training_env_dialog(self)
        if not dialog.property("builds_demo_model"):
            dialog.setProperty("builds_demo_model", True)
            dialog.sig_ready.connect(self.demo_model.training_env_ready)
        return dialog

    def _show_demo_banner(self) -> None:
        from studio.core.project.demo import is_demo_project

        project = self.context.project
        self.demo_banner.show_for(project is not None and is_demo_project(project))

    def _on_project_changed(self, project: Project | None) -> None:
        name = project.name if project else "no project"
        self.setWindowTitle(f"{name} — Training Studio")
        self.project_label.setText(str(project.root) if project else "")
        self._show_demo_banner()
        if self.context.config_error is not None:
            from studio.core.config.files.toml_file import NewerConfigError

            what = ("Open it with the newer studio that wrote it, or update this one: nothing here is saved over it."
                    if isinstance(self.context.config_error, NewerConfigError) else
                    "Fix studio.toml, or choose a preset on the Model & Preset page to start from a valid config.")
            QMessageBox.warning(self, "The project's config has problems",
                                f"{self.context.config_error.describe()}\n\n{what}")

    def confirm_reload(self, pending: str) -> bool:
        """studio.toml changed on disk while edits here are not in it: read it again (True) or keep them."""
        return ask_reload(self, pending)

    def may_drop_edits(self, doing: str) -> bool:
        """Edits here that are not in studio.toml, and a model's captions not reviewed, go when the project is
        left or the window closes: True when there are none or the person lets them go."""
        pending = self.context.lost_on_leaving()
        return not pending or ask_drop_edits(self, pending, doing)

    # ------------------------------------------------------------ help

    def open_documentation(self) -> QDialog:
        """The user guide, rendered in a window of the studio (a desktop may have no program for .md)."""
        from studio.gui.shell.help_window import open_help

        return open_help(self, app_root() / DOCS_URL)

    def show_about(self) -> None:
        from studio.gui.shell.help_window import about_text

        QMessageBox.about(self, "About Training Studio", about_text(__version__))

    # ------------------------------------------------------------ window state

    def _build_page(self, index: int) -> Page:
        page = self._built.get(index)
        if page is None:
            page = PAGES[index].build(self.context)
            stand_in = self.stack.widget(index)
            self.stack.insertWidget(index, page)
            if stand_in is not None:
                self.stack.removeWidget(stand_in)
                stand_in.deleteLater()
            self._built[index] = page
        return page

    def _show_row(self, row: int) -> None:
        if 0 <= row < len(PAGES):
            if not self._restoring:
                self._build_page(row)
            self.stack.setCurrentIndex(row)

    def open_when_shown(self, opener: Callable[[], object]) -> None:
        """Open the start project right after the first paint (at once when the window has painted):
        the window appears with its layout saying "Loading project…", then fills in."""
        if self._painted:
            opener()
            return
        self._start_project = opener
        self.project_label.setText(LOADING_PROJECT)
        stand_in = self.stack.currentWidget()
        if isinstance(stand_in, QLabel):
            stand_in.setText(LOADING_PROJECT)

    def _after_first_paint(self) -> None:
        """The start project (see open_when_shown), then the shown page, then the others."""
        opener, self._start_project = self._start_project, None
        if opener is not None:
            opener()
            if self.context.project is None:
                self.project_label.setText("")  # nothing opened (the folder was refused): no project
        self._show_row(self.nav.currentRow())
        QTimer.singleShot(0, self, self._build_remaining)

    def _build_remaining(self) -> None:
        """Build one more page per turn of the event loop, so input is never held up long; while the shown
        page is still filling in (a dataset being read), wait for it (up to BUSY_WAIT_S): a page built
        meanwhile holds the GUI thread for up to a second, and the grid's images wait behind it."""
        missing = [i for i in range(len(PAGES)) if i not in self._built]
        if not missing:
            return
        shown = self._built.get(self.stack.currentIndex())
        if shown is not None and shown.busy():
            if self._busy_since is None:
                self._busy_since = time.monotonic()
            if time.monotonic() - self._busy_since < BUSY_WAIT_S:
                QTimer.singleShot(BUSY_POLL_MS, self, self._build_remaining)
                return
        self._busy_since = None
        self._build_page(missing[0])
        QTimer.singleShot(0, self, self._build_remaining)

    @property
    def pages(self) -> list[Page]:
        """Every page, built now if it was not yet."""
        return [self._build_page(i) for i in range(len(PAGES))]

    def page(self, page_id: str) -> Page:
        for index, spec in enumerate(PAGES):
            if spec.page_id == page_id:
                return self._build_page(index)
        raise KeyError(page_id)

    def show_page(self, page_id: str) -> Page:
        page = self.page(page_id)
        self.nav.setCurrentRow(self.stack.indexOf(page))
        return page

    def _restore_geometry(self) -> None:
        geometry = self.context.settings.value("window/geometry")
        size = self.context.settings.value("window/size")
        if geometry is not None and not isinstance(geometry, str):
            self.restoreGeometry(geometry)
        # The size is kept apart: restoring geometry clamps to the current screen, which
        # would shrink the window for good after one session on a small display.
        self.resize(size if isinstance(size, QSize) else QSize(1280, 820))
        row = self.context.settings.value("window/page", 0)
        # The page shown is built after the first paint (_after_first_paint), or when asked for.
        self._restoring = True
        try:
            try:
                self.nav.setCurrentRow(max(0, min(int(str(row)), len(PAGES) - 1)))
            except (TypeError, ValueError):
                self.nav.setCurrentRow(0)
            if self.nav.currentRow() < 0:
                self.nav.setCurrentRow(0)
        finally:
            self._restoring = False

    def paintEvent(self, event: object) -> None:
        super().paintEvent(event)  # type: ignore[arg-type]
        if not self._painted:
            self._painted = True
            self.sig_first_paint.emit()
            QTimer.singleShot(0, self, self._after_first_paint)

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.may_drop_edits("Close the studio"):
            event.ignore()
            return
        built = list(self._built.values())
        for page in built:
            if not page.can_close():
                event.ignore()
                return
        for page in built:
            page.shutdown()
        self.demo_model.stop()
        self.context.settings.setValue("window/geometry", self.saveGeometry())
        self.context.settings.setValue("window/size", self.size())
        self.context.settings.setValue("window/page", self.nav.currentRow())
        self.context.settings.sync()
        event.accept()


def _stand_in() -> QLabel:
    """What a page's place shows until the page is built (before the first paint, the start project
    loading)."""
    label = QLabel("Loading…")
    label.setObjectName("page_loading")
    label.setAlignment(Qt.AlignmentFlag.AlignCenter)
    return label


def _action(text: str, parent: QWidget, shortcut: QKeySequence | QKeySequence.StandardKey) -> QAction:
    action = QAction(text, parent)
    action.setShortcut(shortcut)
    return action
