"""`python -m studio --self-test`: open the real window, visit every page, report facts.

Used by CI, by the docs' screenshot script and by anyone checking the app as a
person would. Prints one JSON line; any exception or Qt warning makes it exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

from PySide6.QtCore import QMessageLogContext, QTimer, QtMsgType, qInstallMessageHandler

from studio.gui.base.event_loop import wait_for
from studio.gui.base.selftest_options import SelfTestOptions

REPORT_VAR = "STUDIO_SELF_TEST_REPORT"  # also write the JSON line to this file
# Messages the offscreen platform prints for any window; they say nothing about the studio.
BENIGN_QT_MESSAGES = (
    "This plugin does not support propagateSizeHints()",
    "This plugin does not support raise()",
    "This plugin does not support grabbing the keyboard",
    "QFont::setPointSize: Point size <= 0",
    # Qt's note on a non-UTF-8 locale (LANG=C): it switches to UTF-8 itself; not the studio's fault.
    "Detected locale ",
)


def process_age_s() -> float:
    """Seconds since this process was created.

    On Linux from its start tick on the boot clock: psutil's create_time adds the boot time, which
    /proc/stat gives in whole seconds (and the wall clock moves against it), so an age from it can be
    a second off. Elsewhere psutil's creation time (the kernel's own, to the microsecond)."""
    now = time.time()
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
    import psutil  # not on the app's start path: read after the paint

    return now - psutil.Process().create_time()


class _Problems:
    def __init__(self) -> None:
        self.qt_warnings: list[str] = []
        self.exceptions: list[str] = []

    def qt_message(self, kind: QtMsgType, _context: QMessageLogContext, message: str) -> None:
        if kind in (QtMsgType.QtDebugMsg, QtMsgType.QtInfoMsg):
            return
        if any(message.startswith(b) for b in BENIGN_QT_MESSAGES):
            return
        self.qt_warnings.append(message)
        print(f"Qt warning: {message}", file=sys.stderr)

    def excepthook(self, kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        text = "".join(traceback.format_exception(kind, value, tb))
        self.exceptions.append(text)
        print(text, file=sys.stderr)


def run_self_test(args: argparse.Namespace) -> int:
    """Run the self-test in a scratch folder (settings, demo project) that is removed afterwards."""
    scratch = Path(tempfile.mkdtemp(prefix="studio-selftest-"))
    try:
        return _self_test(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _self_test(args: argparse.Namespace, scratch: Path) -> int:
    problems = _Problems()
    sys.excepthook = problems.excepthook
    qInstallMessageHandler(problems.qt_message)

    from studio.gui.shell.application import make_application, make_settings

    app = make_application()
    from studio.gui.context import StudioContext
    from studio.gui.shell.main_window import PAGES, MainWindow

    options = SelfTestOptions(
        project=Path(args.project or args.project_opt) if (args.project or args.project_opt) else None,
        screenshots=Path(args.screenshots) if args.screenshots else None,
        hardware=Path(args.hardware) if args.hardware else None,
        replay=Path(args.replay) if args.replay else None,
        train_demo=bool(args.train_demo),
        size=getattr(args, "size", None),
    )
    facts: dict[str, Any] = {}
    context = StudioContext(make_settings(scratch / "settings" / "studio.ini"), hardware_file=args.hardware)
    window = MainWindow(context)
    painted: list[float] = []
    window.sig_first_paint.connect(lambda: painted.append(process_age_s()))  # the process's age at the paint
    if options.size is not None:
        window.setMinimumSize(min(window.minimumWidth(), options.size[0]), min(window.minimumHeight(), options.size[1]))
        window.resize(*options.size)
    # The project is opened right after the first paint, as the app opens its start project (the config
    # schema loads then), before the shown page is built and the others in the background.
    opened: list[str] = []

    def open_start_project() -> None:
        from studio.core.project.demo import create_demo_project
        from studio.core.project.folder import create_project, is_project, open_project

        if options.project is not None:
            project = open_project(options.project) if is_project(options.project) \
                else create_project(options.project)
        else:
            project = create_demo_project(scratch / "demo-project", build_model=options.train_demo)
        window.set_project(project)
        opened.append(str(project.root))

    window.open_when_shown(open_start_project)
    window.show()
    wait_for(lambda: bool(painted), 10.0)
    facts["window_size"] = [window.width(), window.height()]
    facts["first_paint_ms"] = round(painted[0] * 1000, 1) if painted else None

    wait_for(lambda: bool(opened) or bool(problems.exceptions), 120.0)
    if not opened:
        raise RuntimeError("the self-test's project was not opened after the first paint")
    facts["project"] = opened[0]

    pages: list[str] = []
    if options.screenshots:
        options.screenshots.mkdir(parents=True, exist_ok=True)
    # Each page is visited as a person would go to it: built when shown (or by the window in the
    # background), not all at once, which would hold up the shown page's dataset behind the others.
    for index, spec in enumerate(PAGES):
        page = window.show_page(spec.page_id)
        app.processEvents()
        try:
            facts.update(page.self_test(options))
        except Exception:
            problems.excepthook(*sys.exc_info())
        app.processEvents()
        if options.screenshots:
            window.grab().save(str(options.screenshots / f"{index + 1:02d}-{page.page_id}.png"))
        pages.append(page.page_id)
    facts["pages"] = pages

    window.close()
    QTimer.singleShot(0, app.quit)
    app.exec()
    facts["torch_imported"] = "torch" in sys.modules
    if sys.platform.startswith("linux"):  # the library path a program the app starts (ssh, a file manager) sees
        child = subprocess.run(["/bin/sh", "-c", 'printf %s "${LD_LIBRARY_PATH-}"'], capture_output=True, text=True,
                               timeout=30)
        facts["child_library_path"] = child.stdout
    facts["qt_platform"] = app.platformName()  # xcb, wayland, offscreen…: which of Qt's platform plugins drew it
    facts["qt_warnings"] = len(problems.qt_warnings)
    facts["exceptions"] = len(problems.exceptions)
    facts["ok"] = not problems.qt_warnings and not problems.exceptions
    line = json.dumps(facts)
    # A windowed app on Windows has no stdout; CI reads the facts from this file instead.
    report = os.environ.get(REPORT_VAR)
    if report:
        Path(report).write_text(line + "\n", encoding="utf-8")
    if sys.stdout is not None:
        print(line, flush=True)
    return 0 if facts["ok"] else 1
