"""Start the desktop app: `studio` (gui-script) or `python -m studio`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from studio.gui.shell.application import make_application, make_settings
from studio.gui.shell.qt_libraries import missing_qt_libraries_message

if TYPE_CHECKING:
    from PySide6.QtWidgets import QApplication

    from studio.gui.shell.main_window import MainWindow


def window_size(text: str) -> tuple[int, int]:
    """'1280x720' -> (1280, 720)."""
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: write it as WIDTHxHEIGHT, e.g. 1280x720") from None
    if width < 320 or height < 240:
        raise argparse.ArgumentTypeError(f"{text} is too small for the window; at least 320x240")
    return width, height


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="studio", description="Training Studio for Stable Diffusion.")
    parser.add_argument("project", nargs="?", help="a project folder to open")
    parser.add_argument("--hardware", help="a hardware profile (JSON file or name) to plan for")
    parser.add_argument("--self-test", action="store_true", help="open every page, report facts as JSON, exit")
    parser.add_argument("--project", dest="project_opt", help="project folder (same as the positional)")
    parser.add_argument("--screenshots", help="self-test: save a PNG of each page into this folder")
    parser.add_argument("--replay", help="self-test: replay this run folder into the Train page")
    parser.add_argument("--train-demo", action="store_true", help="self-test: train the demo through the GUI")
    parser.add_argument("--size", type=window_size, help="self-test: the window's size, e.g. 1280x720")
    parser.add_argument("--first-train-test", action="store_true",
                        help="start as usual, press Train on the demo as a newcomer does, report JSON, exit")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(list(argv) if argv is not None else sys.argv[1:])
    # Qt would abort with a misleading message; name the missing system libraries instead.
    missing = missing_qt_libraries_message(os.environ)
    if missing is not None:
        print(missing, file=sys.stderr)
        return 1
    if args.self_test:
        from studio.gui.shell.selftest import run_self_test

        return run_self_test(args)
    app = make_application()
    from studio.gui.context import StudioContext
    from studio.gui.shell.main_window import MainWindow

    context = StudioContext(make_settings(), hardware_file=args.hardware)
    window = MainWindow(context)
    # The window paints first ("Loading project…"); the project and its config are read after it.
    window.open_when_shown(lambda: open_start_project(window, args, app))
    window.show()
    return app.exec()


def open_start_project(window: MainWindow, args: argparse.Namespace, app: QApplication) -> None:
    """The project named at start, else the most recent one, else the demo (and the first-train test)."""
    project = args.project or args.project_opt
    if project:
        window.open_project_path(project)
    elif window.recent_projects() and Path(window.recent_projects()[0]).is_dir():
        window.open_project_path(window.recent_projects()[0])
    else:
        window.open_demo_project()
    if args.first_train_test:
        from PySide6.QtCore import QTimer

        from studio.gui.shell.first_train import run_first_train

        QTimer.singleShot(0, lambda: run_first_train(window, app))


if __name__ == "__main__":
    sys.exit(main())
