"""Two studio windows on one project: the queue runs in one of them, each item trains once, no item is lost."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from pytestqt.qtbot import QtBot

from studio.core.config.files.toml_file import save_config
from studio.core.config.schema import TrainConfig
from studio.core.runs.scheduling.hold import HOLD_ENV, release_file
from studio.core.runs.scheduling.queue import RunQueue
from tests.gui.conftest import make_project

ROOT = Path(__file__).resolve().parents[3]
WINDOW = ROOT / "tests" / "fixtures" / "queue_window.py"
RUN_NAME = re.compile(r"^\d{8}-\d{6}-(?P<name>[a-z]+)(-\d+)?$")


def test_start_queue_in_two_windows_trains_each_item_once(tmp_path: Path, config: TrainConfig) -> None:
    make_project(tmp_path, config)
    queue = RunQueue(tmp_path)
    for name in ("a", "b", "c"):
        path = tmp_path / f"{name}.toml"
        save_config(config.model_copy(update={"output": config.output.model_copy(update={"name": name})}), path)
        queue.add(path)
    gate = tmp_path / "press-start"
    # Every run waits after step 1 until released: the first window's run still goes on when the other presses.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "QT_QPA_PLATFORM": "offscreen", HOLD_ENV: "1"}
    windows = [subprocess.Popen([sys.executable, str(WINDOW), str(tmp_path), str(gate)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        for window in windows:
            assert window.stdout is not None and window.stdout.readline().strip() == "ready"
        gate.touch()  # both press Start queue now
        for window in windows:
            assert window.stdout is not None and window.stdout.readline().strip() == "pressed"
        while any(window.poll() is None for window in windows):  # both have pressed: let every run go on
            for run in (tmp_path / "runs").glob("*-*"):
                if run.name.startswith("."):  # the output check's own probe file, there for a moment
                    continue
                with contextlib.suppress(NotADirectoryError, FileNotFoundError):
                    release_file(run, 1).touch()
            time.sleep(0.05)
        said = []
        for window in windows:
            # The rest of what each window said, through the file object that read its first lines: it may hold the
            # last line already (communicate() reads the pipe itself and would never see it).
            assert window.stdout is not None and window.stderr is not None
            with window.stdout, window.stderr:
                out, err = window.stdout.read(), window.stderr.read()
            assert window.wait(timeout=60) == 0, err
            said.append(json.loads(out.splitlines()[-1]))
        runs = sorted(RUN_NAME.match(p.name)["name"] for p in (tmp_path / "runs").iterdir())  # type: ignore[index]
        assert runs == ["a", "b", "c"]  # each item trained once, not once per window
        assert sorted(len(s["started"]) for s in said) == [0, 3]
        (other,) = [s for s in said if not s["started"]]
        (runner,) = [w for w, s in zip(windows, said, strict=True) if s["started"]]
        (message,) = other["messages"]
        assert message.startswith(f"The queue of {tmp_path.name} runs in another studio window, process {runner.pid} "
                                  f"on {socket.gethostname()} (since ")
        assert message.endswith("Stop it there (Stop after current) or close that window, then press Start queue here.")
        assert [i.state for i in RunQueue(tmp_path).items] == ["completed"] * 3
    finally:  # a failed test leaves no window (nor its run) behind for the next test
        for window in windows:
            if window.poll() is None:
                window.kill()
                window.wait(30)
            for stream in (window.stdout, window.stderr):
                if stream is not None and not stream.closed:
                    stream.close()


def test_the_queue_list_follows_what_another_window_adds(qtbot: QtBot, tmp_path: Path, config: TrainConfig) -> None:
    from studio.gui.runner.run_controller import RunController
    from studio.gui.runs.queue import QueuePanel

    make_project(tmp_path, config)
    controller = RunController()
    controller.set_project_root(tmp_path)
    panel = QueuePanel(controller)
    qtbot.addWidget(panel)
    other_window = RunQueue(tmp_path)
    other_window.add(tmp_path / "studio.toml")
    qtbot.waitUntil(lambda: panel.list.count() == 1, timeout=5000)
    assert panel.list.item(0).text() == f"{tmp_path.name}/studio.toml — pending"
    controller.shutdown()
