"""The app shell: pages, projects, recent list, geometry, and the self-test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.waits import scaled_s
from PySide6.QtWidgets import QLabel, QMessageBox, QPushButton

from studio.core.project.folder import PROJECT_FILE
from studio.gui.context import StudioContext
from studio.gui.shell.application import make_settings
from studio.gui.shell.main_window import PAGES, MainWindow

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    context = StudioContext(make_settings(tmp_path / "settings.ini"))
    win = MainWindow(context)
    qtbot.addWidget(win)
    return win


def test_navigation_shows_every_page(window: MainWindow) -> None:
    titles = [window.nav.item(i).text() for i in range(window.nav.count())]
    assert titles == ["Dataset", "Model & Preset", "Train", "Runs", "Export"]
    window.nav.setCurrentRow(3)
    assert window.stack.currentWidget().objectName() == "page_runs"


def test_opening_a_plain_folder_offers_to_create_a_project(window: MainWindow, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "my-images"
    folder.mkdir()
    (folder / "keep.txt").write_text("my caption")
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.No)
    assert not window.open_project_path(folder)
    assert not (folder / PROJECT_FILE).exists()
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    assert window.open_project_path(folder)
    assert (folder / PROJECT_FILE).exists()
    assert (folder / "keep.txt").read_text() == "my caption"
    assert window.context.project is not None and window.context.project.root == folder.resolve()
    assert window.recent_projects()[0] == str(folder.resolve())
    assert "my-images" in window.windowTitle()


def test_a_recent_project_deleted_or_on_a_drive_not_connected_is_kept_or_taken_off_the_list(
        window: MainWindow, tmp_path: Path, monkeypatch) -> None:
    from studio.core.project.folder import create_project

    here, gone = create_project(tmp_path / "here"), create_project(tmp_path / "usb" / "cats")
    window.set_project(gone)
    window.set_project(here)
    shutil.rmtree(tmp_path / "usb")
    asked: list[str] = []
    answer = QMessageBox.StandardButton.No
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, _title, text: asked.append(text) or answer)
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, _title, text: asked.append(text))
    action = next(a for a in window.recent_menu.actions() if a.text() == str(gone.root))
    action.trigger()
    assert "does not exist any more" in asked[0] and asked[0].endswith("Remove it from the recent projects?")
    assert window.recent_projects() == [str(here.root), str(gone.root)]  # the drive may be plugged in later
    answer = QMessageBox.StandardButton.Yes
    assert not window.open_project_path(str(gone.root))
    assert window.recent_projects() == [str(here.root)]
    assert [a.text() for a in window.recent_menu.actions()] == [str(here.root)]
    assert window.context.project == here


def test_a_project_written_by_a_newer_studio_is_refused_and_never_saved_over(
        window: MainWindow, tmp_path: Path, monkeypatch) -> None:
    from studio.core.project.folder import create_project

    project = create_project(tmp_path / "from a newer studio")
    newer = project.config_path.read_text(encoding="utf-8").replace("schema_version = 1", "schema_version = 99")
    newer += '[training]\nlearning_rate = 0.0003\n'
    project.config_path.write_text(newer, encoding="utf-8")
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, _title, text: shown.append(text))
    said: list[str] = []
    window.context.sig_status.connect(said.append)
    assert window.open_project_path(project.root)
    assert "update the studio to open this file" in shown[0] and "nothing here is saved over it" in shown[0]
    page = window.show_page("page_model")
    page.on_field_changed("training.seed", 5)  # type: ignore[attr-defined]  # the form shows the defaults
    # Was written over with this studio's defaults and the seed: the newer studio's settings gone.
    assert project.config_path.read_text(encoding="utf-8") == newer
    assert any(text.startswith("Nothing was saved: ") and "written by a newer studio" in text for text in said)


def test_the_projects_studio_toml_given_opens_its_project(window: MainWindow, tmp_path: Path, monkeypatch) -> None:
    from studio.core.project.folder import create_project

    project = create_project(tmp_path / "cats")
    warned: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, _title, text: warned.append(text))
    # Was "The folder …/studio.toml does not exist any more".
    assert window.open_project_path(project.config_path)
    assert warned == [] and window.context.project == project


def test_broken_config_is_explained_not_crashed(window: MainWindow, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / PROJECT_FILE).write_text('[model]\nfamily = "sd4"\nbase = "x"\n')
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, _title, text: shown.append(text))
    assert window.open_project_path(folder)
    assert window.context.config is None
    assert shown and 'model.family = "sd4"' in shown[0]


def test_an_edit_over_a_config_that_could_not_be_read_keeps_the_file_beside_it(
        window: MainWindow, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "older"
    folder.mkdir()
    # Every setting of the person's, and one key this studio does not know (an older or newer studio's).
    theirs = ('schema_version = 1\n[model]\nfamily = "sdxl"\nbase = "my/xl-model"\n[[dataset.concepts]]\n'
              'path = "cats"\nrepeats = 7\n[training]\nlearning_rate = 0.0003\nold_knob = true\n')
    (folder / PROJECT_FILE).write_text(theirs, encoding="utf-8")
    monkeypatch.setattr(QMessageBox, "warning", lambda *_args: None)
    said: list[str] = []
    window.context.sig_status.connect(said.append)
    assert window.open_project_path(folder) and window.context.config is None
    page = window.show_page("page_model")
    page.on_field_changed("training.seed", 5)  # type: ignore[attr-defined]  # the form shows the defaults
    # studio.toml now holds the defaults shown and the seed; the person's settings were lost with the old file.
    assert (folder / (PROJECT_FILE + ".unreadable")).read_text(encoding="utf-8") == theirs
    assert any("could not be read; it is kept as studio.toml.unreadable" in text for text in said)


def test_geometry_and_page_are_remembered(qtbot, tmp_path: Path) -> None:
    settings_file = tmp_path / "settings.ini"
    first = MainWindow(StudioContext(make_settings(settings_file)))
    qtbot.addWidget(first)
    first.resize(1111, 777)
    first.nav.setCurrentRow(2)
    first.close()
    second = MainWindow(StudioContext(make_settings(settings_file)))
    qtbot.addWidget(second)
    assert second.size().width() == 1111
    assert second.nav.currentRow() == 2


def test_gui_modules_do_not_load_torch() -> None:
    script = (
        "import sys, studio.gui.shell.app, studio.gui.shell.main_window, studio.gui.shell.selftest\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch','diffusers','transformers','peft','accelerate','onnxruntime') "
        "or m.startswith(('studio.train', 'studio.caption'))))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_self_test_visits_every_page_and_writes_screenshots(tmp_path: Path) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TMPDIR=str(temp))
    shots = tmp_path / "shots"
    out = subprocess.run(
        [sys.executable, "-m", "studio", "--self-test", "--size", "1280x720", "--screenshots", str(shots)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=scaled_s(120),
    )
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["torch_imported"] is False
    assert facts["pages"] == ["page_dataset", "page_model", "page_train", "page_runs", "page_export"]
    assert facts["first_paint_ms"] > 0
    assert facts["window_size"] == [1280, 720]
    assert facts["runs_rows_visible"] >= 5
    pngs = sorted(p.name for p in shots.glob("*.png"))
    assert len(pngs) == 5 and pngs[0] == "01-page_dataset.png"
    assert all((shots / p).stat().st_size > 1000 for p in pngs)
    from PySide6.QtGui import QImage

    assert QImage(str(shots / pngs[3])).size().toTuple() == (1280, 720)
    assert list(temp.iterdir()) == []  # its scratch folder (settings, demo project) is gone


def test_no_page_is_built_before_the_first_paint_and_the_shown_one_first_after_it(qtbot, tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "settings.ini")
    settings.setValue("window/page", 2)  # the Train page was shown when the studio last closed
    window = MainWindow(StudioContext(settings))
    qtbot.addWidget(window)
    assert window._built == {}
    assert window.stack.currentWidget().objectName() == "page_loading"
    with qtbot.waitSignal(window.sig_first_paint, timeout=5000):
        window.show()
    qtbot.waitUntil(lambda: len(window._built) == 5, timeout=10000)
    assert next(iter(window._built)) == 2  # built first
    assert [window.stack.widget(i).objectName() for i in range(5)] == [
        "page_dataset", "page_model", "page_train", "page_runs", "page_export"
    ]
    assert window.stack.currentWidget().objectName() == "page_train"


def test_the_start_project_is_opened_after_the_window_has_painted(window: MainWindow, qtbot, tmp_path: Path) -> None:
    from studio.core.project.folder import create_project

    project = create_project(tmp_path / "mine")
    opened_at: list[bool] = []

    def opener() -> None:
        opened_at.append(window._painted)
        window.set_project(project)

    window.open_when_shown(opener)
    assert window.project_label.text() == "Loading project…"
    assert window.stack.currentWidget().findChild(QLabel) is None  # the stand-in is the label itself
    assert window.stack.currentWidget().text() == "Loading project…"
    assert window.context.project is None
    window.show()
    qtbot.waitUntil(lambda: window.stack.currentWidget().objectName() == "page_dataset", timeout=10000)
    assert opened_at == [True]
    assert window.project_label.toolTip() == str(project.root)
    assert "mine" in window.windowTitle()


def test_the_other_pages_are_built_once_the_shown_dataset_is_read(  # type: ignore[no-untyped-def]
        window: MainWindow, qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page built in the background holds the GUI thread for up to a second: while the Dataset page
    still reads its images, the others wait, so its grid fills first; then they are built one a turn."""
    from studio.core.project.folder import create_project
    from studio.gui.dataset.page import DatasetPage

    project = create_project(tmp_path / "mine")
    reading = [True]
    monkeypatch.setattr(DatasetPage, "busy", lambda _page: reading[0])
    window.open_when_shown(lambda: window.set_project(project))
    window.show()
    qtbot.waitUntil(lambda: window.stack.currentWidget().objectName() == "page_dataset", timeout=10000)
    qtbot.wait(300)  # ten polls of the busy page
    assert list(window._built) == [0]
    reading[0] = False
    qtbot.waitUntil(lambda: len(window._built) == 5, timeout=10000)


def test_a_page_that_stays_busy_holds_the_others_back_only_so_long(  # type: ignore[no-untyped-def]
        window: MainWindow, qtbot, monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.gui.dataset.page import DatasetPage
    from studio.gui.shell import main_window

    monkeypatch.setattr(DatasetPage, "busy", lambda _page: True)
    monkeypatch.setattr(main_window, "BUSY_WAIT_S", 0.2)
    window.show()
    qtbot.waitUntil(lambda: len(window._built) == 5, timeout=10000)


def test_the_self_tests_clock_gives_a_process_no_more_age_than_it_has() -> None:
    """The first paint is timed from the process's creation: its age can be no more than the time from
    before it was started to after it ended (psutil's creation time put a second on it on Linux)."""
    script = "from studio.gui.shell.selftest import process_age_s\nprint(process_age_s())\n"
    before = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True,
                         timeout=scaled_s(60))
    lived = time.monotonic() - before
    age = float(out.stdout.strip().splitlines()[-1])
    assert 0.0 < age <= lived + 0.02, (age, lived)  # the start tick is counted in hundredths


def test_the_window_paints_before_pydantic_numpy_and_the_run_model_load(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from studio.gui.shell.application import make_application, make_settings\n"
        "app = make_application()\n"
        "from studio.gui.context import StudioContext\n"
        "from studio.gui.shell.main_window import MainWindow\n"
        f"window = MainWindow(StudioContext(make_settings(Path({str(tmp_path / 's.ini')!r}))))\n"
        "seen = []\n"
        "window.sig_first_paint.connect(lambda: seen.append(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic', 'numpy', 'pyqtgraph') or m == 'studio.core.runs.records.run_model')))\n"
        "window.show()\n"
        "while not seen:\n"
        "    app.processEvents()\n"
        "print(seen[0])\n"
    )
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=scaled_s(60))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_demo_caption_edited_then_window_closed_is_in_the_sidecar(qtbot, tmp_path: Path) -> None:
    from studio.core.project.demo import create_demo_project

    project = create_demo_project(tmp_path / "demo")
    win = MainWindow(StudioContext(make_settings(tmp_path / "settings.ini")))
    qtbot.addWidget(win)
    win.set_project(project)
    win.show()
    page = win.show_page("page_dataset")
    qtbot.waitUntil(lambda: page.model.rowCount() == 24 and page.editor.entry is not None, timeout=10000)
    sidecar = page.editor.entry.path.with_suffix(".txt")
    assert sidecar.read_text(encoding="utf-8").startswith("a ")
    page.editor.text.selectAll()
    qtbot.keyClicks(page.editor.text, "sks, a shape I captioned myself")
    win.close()  # straight away: the debounce has not fired yet
    assert sidecar.read_text(encoding="utf-8") == "sks, a shape I captioned myself"


def test_demo_model_build_failure_is_reported_with_its_output(window: MainWindow, tmp_path: Path, qtbot,
                                                             monkeypatch) -> None:
    import studio.core.project.demo as demo
    from studio.core.project.demo import create_demo_project

    script = "import sys; print('building the tiny model'); print('out of disk space', file=sys.stderr); sys.exit(3)"
    monkeypatch.setattr(demo, "model_command", lambda _project: [sys.executable, "-c", script])
    project = create_demo_project(tmp_path / "demo")
    shown: list[str] = []
    window.context.sig_status.connect(shown.append)
    window.demo_model.build(project)
    assert shown == ["Building the demo's tiny model…"] and window.demo_model.builder.is_running()
    window.demo_model.build(project)  # asked again while building: nothing new starts
    qtbot.waitUntil(lambda: not window.demo_model.builder.is_running(), timeout=10000)
    assert shown[-1].startswith("Building the demo model failed (exit 3).")
    assert "out of disk space" in shown[-1]
    log = tmp_path / "demo" / "models" / "tiny-sd15.log"
    assert "building the tiny model" in log.read_text(encoding="utf-8") and str(log) in shown[-1]


def test_the_demo_banner_shows_the_builds_steps_and_seconds(window: MainWindow, tmp_path: Path, qtbot,
                                                            monkeypatch) -> None:
    """The tiny model's build takes up to a minute on a busy machine: the banner shows its step, a bar
    and the seconds so far, not "a few seconds"."""
    import studio.core.project.demo as demo
    from studio.core.project.demo import create_demo_project

    go = tmp_path / "GO"
    script = ("import os, time; print('step 1 of 2: loading PyTorch and diffusers', flush=True)\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
              "print('step 2 of 2: building and writing the tiny sd15 pipeline', flush=True)")
    monkeypatch.setattr(demo, "model_command", lambda _project: [sys.executable, "-c", script])
    project = create_demo_project(tmp_path / "demo")
    window.set_project(project)
    banner = window.demo_banner
    window.demo_model.build(project)
    qtbot.waitUntil(lambda: "loading PyTorch and diffusers (step 1 of 2)" in banner.model_state.text(),
                    timeout=10000)
    assert "s so far" in banner.model_state.text() and "a few seconds" not in banner.model_state.text()
    assert banner.build_bar.isVisibleTo(window) and banner.build_bar.maximum() == 2 and banner.build_bar.value() == 0
    go.write_text("")
    qtbot.waitUntil(lambda: not window.demo_model.builder.is_running(), timeout=10000)
    assert banner.model_state.text() == "The tiny model is ready." and not banner.build_bar.isVisibleTo(window)


def test_closing_the_window_ends_a_demo_model_build(window: MainWindow, tmp_path: Path, qtbot, monkeypatch) -> None:
    import psutil

    import studio.core.project.demo as demo
    from studio.core.project.demo import create_demo_project

    monkeypatch.setattr(demo, "model_command",
                        lambda _project: [sys.executable, "-c", "import time; time.sleep(60)"])
    window.demo_model.build(create_demo_project(tmp_path / "demo"))
    qtbot.waitUntil(lambda: window.demo_model.builder.pid() > 0, timeout=10000)
    builder = psutil.Process(window.demo_model.builder.pid())
    window.close()
    assert not builder.is_running() or builder.status() == psutil.STATUS_ZOMBIE


def test_the_go_menu_reads_as_the_pages_are_named(window: MainWindow) -> None:
    go = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Go")
    # iconText() is the text as drawn, without shortcut marks: "Model & Preset", not "Model _Preset".
    assert [a.iconText() for a in go.actions()] == ["Dataset", "Model & Preset", "Train", "Runs", "Export"]


def test_help_and_edit_prices_say_where_the_file_is_without_a_desktop_program(
        window: MainWindow, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence

    monkeypatch.setenv("STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda _url: False)  # no handler, as on a bare Linux
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "information", lambda _parent, _title, text: shown.append(text))
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    docs = next(a for a in help_menu.actions() if a.shortcut() == QKeySequence("F1"))
    docs.trigger()
    # F1 shows the guide in the studio, rendered (a bare desktop has no program for .md files).
    from studio.gui.shell.help_window import HelpWindow

    help_window = window.findChild(HelpWindow, "help_window")
    assert help_window is not None and help_window.isVisible() and not shown
    text = help_window.browser.toPlainText()
    assert text.startswith("Training Studio: user guide") and "# Training" not in text and "](" not in text
    help_window.browser.setSource(QUrl("tutorial.md"))  # a link of the guide, as a click follows it
    assert help_window.current_file().name == "tutorial.md" and "#" not in help_window.browser.toPlainText()[:40]
    outside = next(b for b in help_window.findChildren(QPushButton) if b.text().startswith("Open the file"))
    outside.click()  # the desktop has no program for it: the message says where the file is
    assert len(shown) == 1 and "No program on this desktop opens the documentation" in shown[0]
    assert QGuiApplication.clipboard().text().endswith("tutorial.md")
    help_window.close()
    page = window.show_page("page_export")
    page.findChild(QPushButton, "export_edit_catalogue").click()
    assert len(shown) == 2 and "prices and speeds" in shown[1]
    assert Path(QGuiApplication.clipboard().text()).is_file()


def test_about_and_the_guides_first_lines_name_every_family(window: MainWindow, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "about", lambda _parent, _title, text: shown.append(text))
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    next(a for a in help_menu.actions() if a.text().startswith("&About")).trigger()
    from studio.core.families import FAMILIES

    assert "with LoRA, LyCORIS and DreamBooth" in shown[0]
    assert [spec.title for spec in FAMILIES if spec.title not in shown[0]] == []
    guide = window.open_documentation()
    opening = guide.browser.toPlainText()[:300].replace("\n", " ")  # type: ignore[attr-defined]
    assert [spec.title for spec in FAMILIES if spec.title not in opening] == [], opening
    guide.close()


def test_a_long_project_path_leaves_the_status_messages_their_room(window: MainWindow, tmp_path: Path) -> None:
    from studio.core.project.folder import create_project

    project = create_project(tmp_path / ("a project folder with a long name " * 4).strip() / "cat lora")
    window.resize(1000, 700)
    window.show()
    window.set_project(project)
    label = window.project_label
    assert label.toolTip() == str(project.root)  # the whole path, on hover
    assert "…" in label.text() and label.text().endswith("cat lora") and label.width() <= 360
    message = "Base model: stable-diffusion-v1-5/stable-diffusion-v1-5, the default for SD 1.x/2.x"
    window.context.status(message)
    assert window.statusBar().currentMessage() == message
    shown = window.statusBar().width() - label.width()
    assert shown >= window.statusBar().fontMetrics().horizontalAdvance(message)  # not cut under the path


def test_pages_still_to_be_built_are_dropped_with_the_window(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The window builds its pages one per turn of the event loop after its first paint; a window closed and
    deleted before they are all built leaves no timer behind that builds into it (before, the next test got
    "Internal C++ object (QStackedWidget) already deleted" from the event loop, or a crash)."""
    import shiboken6
    from PySide6.QtCore import QTimer

    context = StudioContext(make_settings(tmp_path / "settings.ini"))
    window = MainWindow(context)
    window.show()
    qtbot.waitUntil(lambda: window._painted, timeout=5000)
    QTimer.singleShot(0, window, lambda: None)  # let _after_first_paint run and queue the next builds
    qtbot.waitUntil(lambda: len(window._built) >= 1, timeout=5000)
    assert len(window._built) < len(PAGES)  # pages still to be built when it goes
    window.close()
    shiboken6.delete(window)
    qtbot.wait(300)  # an exception in a leftover timer fails the test (pytest-qt's event-loop check)


def test_a_setting_that_cannot_be_saved_says_so(window: MainWindow, tmp_path: Path, monkeypatch) -> None:
    """A project in OneDrive: its studio.toml held by the sync client (or the antivirus) longer than a save waits.
    The change failed with a traceback on the console only; the window looked as if it was saved."""
    from studio.core.project.folder import create_project

    project = create_project(tmp_path / "cats in OneDrive")
    assert window.open_project_path(project.root)
    before = project.config_path.read_text(encoding="utf-8")
    real = os.replace

    def held(source, target) -> None:  # type: ignore[no-untyped-def]
        if Path(target).name == PROJECT_FILE:
            raise PermissionError(13, "The process cannot access the file because it is being used by another "
                                      "process", str(source), None, str(target))
        real(source, target)

    monkeypatch.setattr(os, "replace", held)
    said: list[str] = []
    window.context.sig_status.connect(said.append)
    page = window.show_page("page_model")
    page.on_field_changed("training.seed", 5)  # type: ignore[attr-defined]
    assert project.config_path.read_text(encoding="utf-8") == before
    assert said[-1] == (f"Nothing was saved: {project.config_path} could not be written (The process cannot access "
                        "the file because it is being used by another process); make the change again once it can "
                        "be (a sync client such as OneDrive, or an antivirus, may hold the file for a moment).")
    monkeypatch.setattr(os, "replace", real)
    page.on_field_changed("training.seed", 5)  # type: ignore[attr-defined]  # made again: saved
    assert "seed = 5" in project.config_path.read_text(encoding="utf-8")


def test_a_recent_project_with_an_ampersand_reads_as_its_folder(window: MainWindow, tmp_path: Path) -> None:
    """A menu reads one "&" as the mark of a shortcut letter: "Cats & Dogs" showed as "Cats  Dogs"."""
    from studio.core.project.folder import create_project

    first, second = create_project(tmp_path / "Cats & Dogs"), create_project(tmp_path / "other")
    window.set_project(first)
    window.set_project(second)
    shown = [a.iconText() for a in window.recent_menu.actions()]  # the text as the menu draws it
    assert shown == [str(second.root), str(first.root)]
    window.recent_menu.actions()[1].trigger()
    assert window.context.project is not None and window.context.project.root == first.root
