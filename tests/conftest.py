"""Shared test set-up: offscreen Qt, no network, and never the person's real settings."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("PYTEST_QT_API", "pyside6")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
COMPILE_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # studio.train.compilation.CACHE_ENV (the core tests run without torch)

# The tiny pipelines, tiny captioners, the fake hub, a stand-in wheelhouse, the demo dataset, the
# demo project with a stand-in model and a local sshd (the "remote machine"), built once per session for every folder that uses them.
pytest_plugins = ["fixtures.training", "fixtures.captioners", "fixtures.fake_hub", "fixtures.trainenv", "fixtures.sshd",
                  "fixtures.projects", "fixtures.core_passed"]

try:
    import pytestqt  # noqa: F401

    HAVE_QT = True
except ImportError:
    HAVE_QT = False

# Qt's offscreen platform prints these for any window; they say nothing about the studio.
BENIGN_QT_MESSAGES = (
    "This plugin does not support propagateSizeHints()",
    "This plugin does not support raise()",
    "This plugin does not support grabbing the keyboard",
)


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Settings, caches, user presets and the demo project go to a temporary folder."""
    base = tmp_path_factory.mktemp("user")
    for name in ("STUDIO_CONFIG_DIR", "STUDIO_CACHE_DIR", "STUDIO_DATA_DIR"):
        folder = base / name.lower()
        folder.mkdir()
        monkeypatch.setenv(name, str(folder))
    monkeypatch.delenv("STUDIO_HARDWARE", raising=False)
    # The model library and the preflight read the Hugging Face cache: an empty one of the test's own.
    monkeypatch.setenv("HF_HUB_CACHE", str(base / "hf-hub"))
    monkeypatch.delenv("STUDIO_MODEL_FOLDERS", raising=False)
    if HAVE_QT:
        from PySide6.QtCore import QSettings

        # A page that makes a bare QSettings() still lands in the temporary folder.
        QSettings.setDefaultFormat(QSettings.Format.IniFormat)
        for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
            QSettings.setPath(QSettings.Format.IniFormat, scope, str(base / "qsettings"))
    yield base


@pytest.fixture(autouse=True)
def _compile_cache_left_as_found() -> Iterator[None]:
    """A run with training.compile points torch's compile cache at the studio's cache folder for the rest of its
    process (use_compile_cache), which in a test is that test's empty temporary one. Left so, every later test
    of the worker that compiles (bitsandbytes builds its CPU nf4 kernels for each new weight shape) built them
    all again from nothing: the Z-Image nf4 test took 15 s after the compile tests instead of 4 s."""
    before = os.environ.get(COMPILE_CACHE_ENV)
    yield
    if before is None:
        os.environ.pop(COMPILE_CACHE_ENV, None)
    else:
        os.environ[COMPILE_CACHE_ENV] = before


@pytest.fixture(scope="module", autouse=True)
def _what_is_alive_before_a_module_left_out_of_collections() -> None:
    """A full collection walks every object the worker holds: after the training tests (torch, diffusers,
    transformers and every family's models imported), a million of them, though none is ever garbage. Each
    Qt test ends with one (below: about 0.6 s a test), and the interpreter's own full collections took a
    sixth of the training tests' time. Before each module, what is alive (the libraries, the session's
    fixtures; the earlier modules' fixtures are gone by then) is collected and frozen (gc.freeze): the
    collections after it walk only what was made since. The module's own fixtures are made after this one,
    so they and everything its tests make are collected as before."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--repeat-test", action="append", default=[], metavar="NAME*N",
                     help="run every test whose id contains NAME N times, beside the rest (to find flaky tests)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for spec in metafunc.config.getoption("repeat_test"):
        name, _, times = spec.rpartition("*")
        if name and name in metafunc.definition.nodeid and int(times) > 1:
            metafunc.fixturenames.append("repeat_index")
            metafunc.parametrize("repeat_index", range(int(times)), ids=lambda i: f"repeat{i}")
            return


def pytest_report_header(config: pytest.Config) -> str:
    from fixtures.waits import measured_slowness

    return (f"machine slowness {measured_slowness():.1f} (test deadlines are scaled by it and by the load average; "
            "STUDIO_TEST_SLOWNESS sets it)")


@pytest.fixture(autouse=True)
def _deadlines_scaled_to_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """qtbot's waits get the timeout a test names for a quiet machine, times this machine's slowness."""
    if not HAVE_QT:
        return
    from fixtures.waits import scaled_ms
    from pytestqt.qtbot import QtBot

    for name, default in (("waitUntil", 5000), ("waitSignal", 5000), ("waitSignals", 5000)):
        original = getattr(QtBot, name)

        def scaled(self: QtBot, *args: object, _original: object = original, _default: int = default,
                   **kwargs: object) -> object:
            timeout = kwargs.get("timeout", _default)
            if isinstance(timeout, int) and timeout > 0:
                kwargs["timeout"] = scaled_ms(timeout)
            return _original(self, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(QtBot, name, scaled)


@pytest.fixture(autouse=True)
def _cycles_collected_on_the_gui_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    """As in the app (make_application): Python's cycle collector runs on the GUI thread only, so a
    Worker's pool thread never destroys a test's closed dialogs and QProcesses. After each Qt test
    the GUI thread collects everything (about 0.4 s with torch loaded, 225 tests): no wrapper of a
    test's deleted Qt objects lives on in a cycle into the next test, where Qt may reuse its address.

    The widgets a test hands to qtbot are held here until pytest-qt has closed them: pytest-qt keeps a weak
    reference only, so a page in a cycle whose test had returned was collected by the GUI thread's collector
    in the events pytest-qt processes after the call, with its close hook (the plots' close_plots) never run,
    and Qt laid out its plots while the collector took them apart (eight errors from their titles)."""
    if not HAVE_QT or not {"qtbot", "qapp"} & set(request.fixturenames):
        yield
        return
    import gc

    from pytestqt.qtbot import QtBot

    from studio.gui.base.gui_thread_gc import install_gui_thread_gc
    from studio.gui.base.layout_items import install as install_layout_item_guard

    install_layout_item_guard()  # as make_application does
    install_gui_thread_gc(request.getfixturevalue("qapp"))
    held: list[object] = []
    add_widget = QtBot.addWidget

    def holding(self: QtBot, widget: object, *, before_close_func: object = None) -> None:
        held.append(widget)
        add_widget(self, widget, before_close_func=before_close_func)  # type: ignore[arg-type]

    request.getfixturevalue("monkeypatch").setattr(QtBot, "addWidget", holding)
    yield
    held.clear()  # closed and handed to Qt for deletion by now (pytest-qt's teardown runs first)
    gc.collect()


def pytest_configure(config: pytest.Config) -> None:
    """With pytest-xdist loaded (not in a run with `-p no:xdist`), `--dist load` hands out whole modules."""
    if config.pluginmanager.hasplugin("xdist"):
        from fixtures.module_scheduling import ModuleScheduler

        config.pluginmanager.register(ModuleScheduler(), "studio-module-scheduling")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The modules with slow (end-to-end) tests first: the workers are handed whole modules in this order
    # (fixtures/module_scheduling.py), so a run ends on quick tests instead of on one worker finishing a long one.
    with_slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in with_slow)
    for item in items:
        if "tests/gui/" in item.nodeid.replace(os.sep, "/") or "tests/e2e/" in item.nodeid:
            item.add_marker(pytest.mark.gui)
    if not HAVE_QT:
        return
    for item in items:
        item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
        item.add_marker(pytest.mark.qt_log_ignore(*(m.replace("(", r"\(").replace(")", r"\)") for m in BENIGN_QT_MESSAGES)))


@pytest.fixture
def memory_tmp(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A folder for one test's multi-GB files, in memory where there is room (fixtures/built_once.py);
    removed after the test."""
    from fixtures.built_once import memory_folder

    folder = memory_folder(tmp_path_factory) / f"{os.getpid()}-{request.node.name[:60]}"
    folder.mkdir()
    yield folder
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test that leaves a trainer, a rank or a helper process running fails the run.

    (A hung distributed rank once lived on for hours after its test had timed out.)
    multiprocessing's resource tracker is expected: it ends with the interpreter.
    The run's multi-GB files in memory are removed when the whole run ends (by xdist's controller).
    """
    import psutil

    if not hasattr(session.config, "workerinput"):
        from fixtures.built_once import remove_memory_folder

        remove_memory_folder(session.config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]

    left = [
        child for child in psutil.Process().children(recursive=True)
        if "multiprocessing.resource_tracker" not in " ".join(_cmdline(child))
    ]
    if not left:
        return
    described = "\n".join(f"  pid {p.pid}: {' '.join(_cmdline(p))[:200]}" for p in left)
    for child in left:
        with contextlib.suppress(psutil.Error):
            child.kill()
    print(f"\nERROR: the tests left {len(left)} process(es) running (now killed):\n{described}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _cmdline(process: object) -> list[str]:
    import psutil

    try:
        return process.cmdline()  # type: ignore[attr-defined, no-any-return]
    except psutil.Error:
        return []
