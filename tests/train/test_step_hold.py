"""The trainer's test hook: a run held at a step waits there, with that step's event on disk, until
Stop or a release; tests that stop or watch a real run use it instead of racing it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from studio.core.runs.events import RunFinished, Step, read_events
from studio.core.runs.folders import STOP_FILE
from studio.core.runs.scheduling.hold import HOLD_ENV, release_file

pytest.importorskip("torch")


def _person(runs: Path, step: int, act: Callable[[Path], None], seen: list[list[int]]) -> threading.Thread:
    """Waits for the run's folder and its step event, looks at the events, then acts (Stop or release)."""

    def watch() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            for events in runs.glob("*/events.jsonl"):
                steps = [e.step for e in read_events(events) if isinstance(e, Step)]
                if step in steps:
                    time.sleep(0.3)  # a run that were not held would go on meanwhile
                    seen.append([e.step for e in read_events(events) if isinstance(e, Step)])
                    act(events.parent)
                    return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("act", ["stop", "release"])
def test_a_held_run_waits_at_its_step_then_stops_there_or_goes_on(act: str, make_config, run_training,
                                                                  events_of, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOLD_ENV, "3")
    config = make_config()
    seen: list[list[int]] = []
    action = ((lambda run_dir: (run_dir / STOP_FILE).write_text("stop", encoding="utf-8")) if act == "stop"
              else (lambda run_dir: release_file(run_dir, 3).write_text("go", encoding="utf-8")))
    person = _person(Path(config.output.dir), 3, action, seen)
    code, run_dir = run_training(config, tmp_path / "run")
    person.join(timeout=5)
    assert code == 0
    assert seen == [[1, 2, 3]]  # held: nothing past step 3 while the person looked
    finished = [e for e in events_of(run_dir) if isinstance(e, RunFinished)]
    if act == "stop":
        assert [(f.status, f.step) for f in finished] == [("stopped", 3)]
    else:
        assert [(f.status, f.step) for f in finished] == [("completed", config.training.max_steps)]


def test_a_bad_hold_variable_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.runs.scheduling.hold import held_steps

    assert held_steps({HOLD_ENV: "2, 10"}) == {2, 10} and held_steps({}) == frozenset()
    with pytest.raises(ValueError, match="STUDIO_TEST_HOLD_STEPS='two' is not a comma-separated list"):
        held_steps({HOLD_ENV: "two"})
