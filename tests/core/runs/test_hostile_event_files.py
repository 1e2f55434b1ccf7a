"""Events files as they arrive from other users, containers and older or broken writers:
readers finish, skip what they cannot use, and every other run still shows."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from studio.core.runs.events import RunFinished, RunStarted, RunWarning, read_events
from studio.core.runs.records.history import list_runs
from studio.core.runs.records.outcome import completed_run
from studio.core.runs.records.run_model import EventTail, replay_run
from tests.core.runs.conftest import step_event, write_events


def never_alive(_: Path) -> bool:
    return False


def finishes_within(seconds: float, work: Callable[[], Any]) -> Any:
    """`work()`'s result; fails the test (instead of hanging it) when it runs past `seconds`."""
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(work()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s (an endless loop?)"
    return result[0]


def _good_run(runs: Path, name: str) -> Path:
    run = runs / name
    write_events(run / "events.jsonl", [
        RunStarted(config={"model": {"family": "sd15"}, "method": {"kind": "lora"}}, world_size=1,
                   total_steps=2, devices=["cpu"], time=1000.0),
        step_event(1), step_event(2), RunFinished(status="completed", step=2, time=1010.0)])
    return run


def test_an_events_file_that_cannot_be_read_ends_the_replay_and_the_list_says_why(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _good_run(runs, "20240101-000000-good")
    broken = runs / "20240102-000000-locked"
    (broken / "events.jsonl").mkdir(parents=True)  # open() fails as it does for another user's file
    (broken / "config.toml").write_text('[model]\nfamily = "sd15"\n', encoding="utf-8")

    replay = finishes_within(10, lambda: replay_run(broken))
    assert replay.events == 0 and replay.read_error is not None

    rows = finishes_within(10, lambda: list_runs(runs, never_alive))
    by_name = {r.name: r for r in rows}
    assert by_name["20240101-000000-good"].status == "completed"
    locked = by_name["20240102-000000-locked"]
    assert locked.status == "unreadable" and "events.jsonl cannot be read" in locked.message
    assert not locked.resumable


def test_a_live_tail_of_an_unreadable_file_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "events.jsonl").mkdir()
    tail = EventTail(tmp_path / "events.jsonl", max_bytes=100)
    for _ in range(50):  # the GUI polls 20 times a second
        assert tail.poll_items() == []
    assert not tail.has_more()
    assert len([r for r in caplog.records if "cannot read" in r.getMessage()]) == 1


WRONG_TYPES = [
    {"type": "sample", "step": 3, "images": 5, "prompts": ["a"]},
    {"type": "phase", "name": ["x"], "done": 0, "total": 1},
    {"type": "run_started", "config": "x", "world_size": 1, "total_steps": 2, "devices": ["cpu"]},
    {"type": "warning", "message": "m", "time": "yesterday"},
    {"type": "checkpoint", "step": "three", "path": "c"},
    {"type": "run_finished", "status": "completed", "outputs": "output/x.safetensors"},
    {"type": "step", "step": 3, "epoch": 1, "loss": "high", "lr": 1e-4},
]


@pytest.mark.parametrize("line", WRONG_TYPES, ids=[f"{d['type']}-{i}" for i, d in enumerate(WRONG_TYPES)])
def test_one_wrong_typed_line_is_skipped_and_every_run_is_still_listed(tmp_path: Path, line: dict[str, Any]) -> None:
    runs = tmp_path / "runs"
    _good_run(runs, "20240101-000000-good")
    bad = _good_run(runs, "20240102-000000-bad")
    with open(bad / "events.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"v": 1, "time": 1020.0, **line}) + "\n")

    rows = list_runs(runs, never_alive)
    assert sorted(r.name for r in rows) == ["20240101-000000-good", "20240102-000000-bad"]
    assert [(r.status, r.steps) for r in rows] == [("completed", 2), ("completed", 2)]
    assert replay_run(bad).garbage_lines == 1
    assert len(read_events(bad / "events.jsonl")) == 4  # the bad line is not an event


def test_a_config_of_the_wrong_shape_in_run_started_still_lists_the_run(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "20240101-000000-odd"
    write_events(run / "events.jsonl", [RunStarted(config={"model": "x", "method": 3}, world_size=1,
                                                   total_steps=2, devices=["cpu"]), step_event(1)])
    (row,) = list_runs(tmp_path / "runs", never_alive)
    assert (row.family, row.method, row.steps) == ("", "", 1)


def test_a_warning_about_a_file_name_that_is_not_utf8_reaches_every_reader(tmp_path: Path) -> None:
    name = b"caf\xe9.png".decode("utf-8", "surrogateescape")  # how Python names such a file
    events = tmp_path / "events.jsonl"
    write_events(events, [RunWarning(message=f"skipped {name}: it cannot be read", path=f"/data/{name}")])
    # The GUI's reader (orjson) and the command line's (json) both see it, the byte shown as \xe9.
    (warning,) = EventTail(events).poll()
    assert isinstance(warning, RunWarning)
    assert warning.message == "skipped caf\\xe9.png: it cannot be read" and warning.path == "/data/caf\\xe9.png"
    assert read_events(events)[0] == warning


def test_a_line_an_older_writer_made_with_a_lone_surrogate_is_read(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text('{"v":1,"type":"warning","time":1.0,"message":"skipped \\udce9.png"}\n', encoding="utf-8")
    (warning,) = EventTail(events).poll()
    assert isinstance(warning, RunWarning) and warning.message.startswith("skipped ")


def test_a_deeply_nested_line_is_garbage_not_a_crash(tmp_path: Path) -> None:
    run = _good_run(tmp_path, "20240101-000000-deep")
    with open(run / "events.jsonl", "a", encoding="utf-8") as handle:
        handle.write("[" * 100_000 + "]" * 100_000 + "\n")
    assert completed_run(run) is not None  # what `studio-train resume` asks first
    assert len(read_events(run / "events.jsonl")) == 4
    assert replay_run(run).model.status == "finished"


def test_a_relative_name_in_the_events_never_points_beside_the_run(tmp_path: Path) -> None:
    from studio.core.runs.records.run_model import RunModel

    run = tmp_path / "runs" / "r"
    (run / "samples").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("not the run's")
    model = RunModel(run)
    assert model.resolve("samples/a.png") == run / "samples" / "a.png"
    for hostile in ("../../secret.txt", "samples/../../../secret.txt", "..\\..\\secret.txt"):
        resolved = model.resolve(hostile)
        assert run in resolved.parents and not resolved.exists(), hostile


def test_an_absolute_name_in_the_events_is_looked_for_only_inside_the_run(tmp_path: Path) -> None:
    """Events copied from elsewhere that name a file of this computer (or a network share) by an absolute
    path: the Train and Runs pages never show or open it; the run's own absolute names still resolve,
    through a linked folder too."""
    from studio.core.runs.records.run_model import RunModel

    real = tmp_path / "disk" / "r"
    (real / "samples").mkdir(parents=True)
    (real / "samples" / "a.png").write_bytes(b"png")
    (tmp_path / "runs").mkdir()
    run = tmp_path / "runs" / "r"
    run.symlink_to(real, target_is_directory=True)
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not the run's")
    model = RunModel(run)
    for hostile in (str(secret), f"{run}/../../secret.png", f"/elsewhere/r/../../{secret.relative_to('/')}",
                    f"{real}/samples/../../../secret.png", "//server/share/secret.png", "/"):
        resolved = model.resolve(hostile)
        assert resolved == run or run in resolved.parents, hostile
        assert not resolved.is_file() or resolved.read_bytes() != b"not the run's", hostile
    assert model.resolve(str(run / "samples" / "a.png")) == run / "samples" / "a.png"
    assert model.resolve(str(real / "samples" / "a.png")) == run / "samples" / "a.png"


def test_an_endless_line_costs_the_event_tail_no_more_per_poll_than_any_other_bytes(tmp_path: Path) -> None:
    """The local tail holds at most 1 MB of a line with no newline and skips it whole when it ends."""
    import time

    from studio.core.runs.events import Step
    from studio.core.runs.tail import EventTail

    path = tmp_path / "events.jsonl"
    good = b'{"v":1,"type":"step","time":1.0,"step":1,"epoch":0,"loss":0.5,"lr":0.0001}\n'
    with open(path, "wb") as handle:
        handle.write(good + b"x" * (30 * 2**20))
    tail = EventTail(path, max_bytes=512 * 1024)
    began = time.process_time()
    steps = [e.step for e in tail.poll() if isinstance(e, Step)]
    most_held = 0
    while tail.has_more():
        steps += [e.step for e in tail.poll() if isinstance(e, Step)]
        most_held = max(most_held, len(tail._file.lines._partial))
    with open(path, "ab") as handle:
        handle.write(b"\n" + good)
    steps += [e.step for e in tail.poll() if isinstance(e, Step)]
    assert time.process_time() - began < 1.0
    assert steps == [1, 1] and tail.garbage_lines == 1
    assert most_held <= 2**20 and tail.pending_bytes == 0
