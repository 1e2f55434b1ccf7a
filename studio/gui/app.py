"""Start the desktop app: `studio` (gui-script) or `python -m studio`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from platformdirs import user_config_dir
from PySide6.QtCore import QSettings
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

APP_NAME = "sd-training-studio"
RESOURCES = Path(__file__).resolve().parents[2] / "resources"


def settings_path() -> Path:
    """The app's settings file; STUDIO_CONFIG_DIR moves it (tests never touch the real one)."""
    base = os.environ.get("STUDIO_CONFIG_DIR") or user_config_dir(APP_NAME, appauthor=False)
    return Path(base) / "studio.ini"


def make_settings(path: Path | None = None) -> QSettings:
    target = path or settings_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    return QSettings(str(target), QSettings.Format.IniFormat)


def make_application(argv: Sequence[str] | None = None) -> QApplication:
    existing = QApplication.instance()
    if isinstance(existing, QApplication):
        return existing
    app = QApplication(list(argv or sys.argv[:1]))
    app.setApplicationName("Training Studio")
    app.setOrganizationName(APP_NAME)
    app.setApplicationDisplayName("Training Studio")
    icon = RESOURCES / "icons" / "studio.svg"
    if icon.exists():
        app.setWindowIcon(QIcon(str(icon)))
    style = RESOURCES / "style.qss"
    if style.exists():
        app.setStyleSheet(style.read_text(encoding="utf-8"))
    return app


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="studio", description="Training Studio for Stable Diffusion.")
    parser.add_argument("project", nargs="?", help="a project folder to open")
    parser.add_argument("--hardware", help="a hardware profile (JSON file or name) to plan for")
    parser.add_argument("--self-test", action="store_true", help="open every page, report facts as JSON, exit")
    parser.add_argument("--project", dest="project_opt", help="project folder (same as the positional)")
    parser.add_argument("--screenshots", help="self-test: save a PNG of each page into this folder")
    parser.add_argument("--replay", help="self-test: replay this run folder into the Train page")
    parser.add_argument("--train-demo", action="store_true", help="self-test: train the demo through the GUI")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(list(argv) if argv is not None else sys.argv[1:])
    if args.self_test:
        from studio.gui.selftest import run_self_test

        return run_self_test(args)
    app = make_application()
    from studio.gui.context import StudioContext
    from studio.gui.main_window import MainWindow

    context = StudioContext(make_settings(), hardware_file=args.hardware)
    window = MainWindow(context)
    window.show()
    project = args.project or args.project_opt
    if project:
        window.open_project_path(project)
    elif window.recent_projects() and Path(window.recent_projects()[0]).is_dir():
        window.open_project_path(window.recent_projects()[0])
    else:
        window.open_demo_project()
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
