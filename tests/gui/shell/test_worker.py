"""Background work: the function runs off the GUI thread, its result or error comes back on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fixtures.waits import scaled_s
from PySide6.QtCore import QTimer
from pytestqt.qtbot import QtBot

from studio.gui.runner.worker import Worker


@pytest.fixture
def worker(qtbot: QtBot) -> Iterator[Worker]:
    made = Worker()
    yield made
    made.shutdown(5.0)
    made.deleteLater()


def test_result_and_progress_arrive_on_the_gui_thread_while_the_window_runs(qtbot: QtBot, worker: Worker) -> None:
    seen: dict[str, Any] = {"ticks": 0, "progress": []}
    turned = threading.Event()

    def slow(x: int, progress: Any) -> int:
        seen["ran_on"] = threading.current_thread()
        progress("half way", 1, 2)
        # The work lasts until the GUI thread's timer has ticked five times (on a loaded machine that
        # takes longer than on a quiet one): the window runs while the work does.
        seen["turned_while_busy"] = turned.wait(scaled_s(10))
        return x * 2

    def tick() -> None:
        seen["ticks"] += 1
        if seen["ticks"] >= 5:
            turned.set()

    def done(result: int) -> None:
        seen.update(result=result, done_on=threading.current_thread())

    ticker = QTimer(interval=20)
    ticker.timeout.connect(tick)
    ticker.start()
    worker.run(slow, 21, on_done=done, on_progress=lambda *p: seen["progress"].append(p))
    assert worker.busy
    qtbot.waitUntil(lambda: "result" in seen, timeout=5000)
    ticker.stop()
    assert seen["result"] == 42 and not worker.busy
    assert seen["progress"] == [("half way", 1, 2)]
    assert seen["ran_on"] is not threading.main_thread()
    assert seen["done_on"] is threading.main_thread()
    assert seen["turned_while_busy"]  # the event loop kept turning while the work ran


def test_an_expected_error_goes_to_on_failed_only(qtbot: QtBot, worker: Worker) -> None:
    failures: list[BaseException] = []

    def refuse() -> None:
        raise ValueError("the profile file is not JSON")

    with qtbot.captureExceptions() as raised:
        worker.run(refuse, on_done=lambda _r: pytest.fail("no result expected"), on_failed=failures.append,
                   expected=(ValueError,))
        assert worker.wait(5.0)
    assert [str(e) for e in failures] == ["the profile file is not JSON"]
    assert raised == []


def test_an_unexpected_error_is_shown_and_reported_as_a_bug(qtbot: QtBot, worker: Worker) -> None:
    failures: list[BaseException] = []

    def broken() -> None:
        raise KeyError("a bug")

    with qtbot.captureExceptions() as raised:
        worker.run(broken, on_done=lambda _r: None, on_failed=failures.append, expected=(ValueError,))
        worker.wait(5.0)
    assert len(failures) == 1 and isinstance(failures[0], KeyError)
    assert len(raised) == 1 and raised[0][1] is failures[0]  # reached the exception hook, not swallowed


def test_a_cancelled_job_delivers_nothing(qtbot: QtBot, worker: Worker) -> None:
    results: list[int] = []
    release = threading.Event()
    first = worker.run(lambda: release.wait(5) and 1, on_done=results.append)
    worker.run(lambda: 2, on_done=results.append)
    first.cancel()
    release.set()
    qtbot.waitUntil(lambda: not worker.busy, timeout=5000)
    assert results == [2]


def test_shutdown_forgets_calls_not_started(qtbot: QtBot, worker: Worker) -> None:
    ran: list[int] = []
    release = threading.Event()
    worker.run(lambda: release.wait(5) and ran.append(1), on_done=lambda _r: None)
    worker.run(lambda: ran.append(2), on_done=lambda _r: pytest.fail("dropped at shutdown"))
    threading.Timer(0.05, release.set).start()  # shutdown holds the GUI thread: no QTimer would fire
    worker.shutdown(5.0)
    qtbot.wait(50)
    assert ran == [1] and not worker.busy
