"""A week-long run's events file (a gigabyte of steps) is summed up from its two ends, never parsed whole.

The Runs table, `studio-train resume` and the studio's last console line read a few MB at
the head and the tail of the file; a TensorBoard export streams it a piece at a time.
"""

from __future__ import annotations

import builtins
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from studio.core.runs.event_reading.files import events_backwards, stream_events
from studio.core.runs.events import Error, RunFinished, RunStarted, Validation, read_events
from studio.core.runs.records.history import summarize_run
from studio.core.runs.records.outcome import completed_run, last_finish, outcome_line
from tests.core.runs.conftest import step_event, write_events

BIG_BYTES = 24 << 20  # three times what the Runs table reads whole; a few hundred ms to write
READ_LIMIT = 3 << 20  # a summary reads its two ends: 256 KB + 1 MB, with room to spare


def never_alive(_: Path) -> bool:
    return False


def _long_run(run: Path, finish: bool = True) -> Path:
    """A run with ~100,000 identical step lines between its first and its last events."""
    events = run / "events.jsonl"
    write_events(events, [RunStarted(config={"model": {"family": "sdxl"}, "method": {"kind": "lora"}},
                                     world_size=1, total_steps=200_000, devices=["cuda:0"], time=1000.0)])
    middle = (step_event(5, loss=0.9, t=2000.0).to_json() + "\n").encode()
    with open(events, "ab") as handle:
        handle.write(middle * (BIG_BYTES // len(middle)))
    last: list[Any] = [step_event(s, loss=0.125, t=90_000.0) for s in range(199_990, 200_001)]
    last.append(Validation(step=200_000, loss=0.25, images=4, time=90_001.0))
    if finish:
        last.append(RunFinished(status="completed", step=200_000, outputs=["output/lora.safetensors"],
                                time=90_002.0))
    write_events(events, last)
    return run


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Bytes read from any events.jsonl through `open` (the readers' only way in)."""
    counts = {"events.jsonl": 0}
    real_open = builtins.open

    class Counted:
        def __init__(self, handle: Any) -> None:
            self._handle = handle

        def read(self, size: int = -1) -> Any:
            data = self._handle.read(size)
            counts["events.jsonl"] += len(data)
            return data

        def __iter__(self) -> Iterator[Any]:
            for line in self._handle:
                counts["events.jsonl"] += len(line)
                yield line

        def __getattr__(self, name: str) -> Any:
            return getattr(self._handle, name)

        def __enter__(self) -> Counted:
            return self

        def __exit__(self, *exc: object) -> None:
            self._handle.close()

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, *args, **kwargs)
        return Counted(handle) if str(file).endswith("events.jsonl") else handle

    monkeypatch.setattr(builtins, "open", counting_open)
    return counts


def test_the_runs_table_sums_up_a_long_run_from_its_two_ends(tmp_path: Path, bytes_read: dict[str, int]) -> None:
    run = _long_run(tmp_path / "20260101-000000-week")
    row = summarize_run(run, never_alive)
    assert (row.status, row.steps, row.total_steps) == ("completed", 200_000, 200_000)
    assert (row.family, row.method, row.final_loss, row.validation_loss) == ("sdxl", "lora", 0.125, 0.25)
    assert row.duration_s == pytest.approx(89_002.0)
    assert row.outputs == [str(run / "output" / "lora.safetensors")]
    assert bytes_read["events.jsonl"] < READ_LIMIT, f"read {bytes_read['events.jsonl']:,} bytes"


def test_a_killed_long_run_is_interrupted_and_resume_reads_only_its_tail(tmp_path: Path,
                                                                         bytes_read: dict[str, int]) -> None:
    run = _long_run(tmp_path / "20260101-000000-killed", finish=False)
    row = summarize_run(run, never_alive)
    assert (row.status, row.steps, row.resumable) == ("interrupted", 200_000, True)
    assert "without run_finished" in row.message
    assert completed_run(run) is None  # what `studio-train resume` asks first
    assert "ended (exit code 137) without finishing the run" in outcome_line(run, 137)
    assert bytes_read["events.jsonl"] < 3 * (8 << 20)  # the tail's limit, for each of the three questions


def test_a_long_run_killed_and_resumed_near_its_end_leaves_out_the_time_it_stood_dead(tmp_path: Path) -> None:
    """Trained from 1,000 to 9,000, killed there without a word, resumed the next day: the tail read for the
    Runs table holds both legs, and the day between is no training time (8,000 s and 20 s of training)."""
    from studio.core.runs.events import Phase

    events = tmp_path / "20260101-000000-crashed" / "events.jsonl"
    write_events(events, [RunStarted(config={}, world_size=1, total_steps=200_000, devices=["cuda:0"], time=1000.0)])
    middle = (step_event(5, t=2000.0).to_json() + "\n").encode()
    with open(events, "ab") as handle:
        handle.write(middle * (BIG_BYTES // len(middle)))
    write_events(events, [
        *[step_event(s, t=9000.0 - 200_000) for s in range(199_990, 200_000)],  # the last at 8,999
        Phase(name="loading", done=0, total=1, message="loading the model", time=95_000.0),
        RunStarted(config={}, world_size=1, total_steps=200_000, devices=["cuda:0"], resumed_from_step=199_990,
                   time=95_010.0),
        *[step_event(s, t=95_020.0 - 200_000) for s in range(199_991, 200_001)],  # 95,011 to 95,020
        RunFinished(status="completed", step=200_000, time=95_020.0)])
    row = summarize_run(events.parent, never_alive)
    assert row.status == "completed"
    assert row.duration_s == pytest.approx(7_999.0 + 20.0)


def test_resume_refuses_a_long_completed_run_from_its_tail(tmp_path: Path, bytes_read: dict[str, int]) -> None:
    run = _long_run(tmp_path / "20260101-000000-done")
    finished = completed_run(run)
    assert finished is not None and finished.step == 200_000
    assert "validation loss 0.2500 at step 200000" in outcome_line(run, 0)
    assert bytes_read["events.jsonl"] < READ_LIMIT


def test_the_last_leg_decides_how_a_resumed_run_ended(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    write_events(events, [RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"]),
                          Error(kind="oom", message="out of memory"), RunFinished(status="failed", step=3),
                          RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"], resumed_from_step=3),
                          step_event(4)])
    assert last_finish(tmp_path) == (None, None)  # the resumed leg was killed: no finish of its own
    write_events(events, [RunFinished(status="stopped", step=4)])
    finished, error = last_finish(tmp_path)
    assert finished is not None and finished.status == "stopped" and error is None


def test_a_resumed_run_reports_no_validation_of_the_training_it_lost(tmp_path: Path) -> None:
    """Killed at step 6 after validating at steps 4 and 6, resumed from the checkpoint at step 4, stopped at step
    5: its last line names the loss at step 4, never the killed leg's at step 6 (a step it never reached)."""
    events = tmp_path / "events.jsonl"
    write_events(events, [RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"]),
                          *(step_event(s) for s in range(1, 5)), Validation(step=4, loss=0.25, images=2),
                          *(step_event(s) for s in range(5, 7)), Validation(step=6, loss=0.125, images=2),
                          RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"], resumed_from_step=4),
                          step_event(5), RunFinished(status="stopped", step=5)])
    line = outcome_line(tmp_path, 0)
    assert "run stopped at step 5; validation loss 0.2500 at step 4" in line and "at step 6" not in line


def test_the_runs_table_shows_no_validation_of_the_training_a_long_resumed_run_lost(tmp_path: Path) -> None:
    """A long run killed after validating at step 6, resumed from its checkpoint at step 4 and stopped at step 5
    a megabyte of steps later: its row shows the loss at step 4 (the killed leg's at step 6 was lost with it)."""
    events = tmp_path / "events.jsonl"
    write_events(events, [RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"])])
    line = (step_event(3).to_json() + "\n").encode()
    with open(events, "ab") as handle:
        handle.write(line * (BIG_BYTES // 2 // len(line)))  # read at its two ends only
    write_events(events, [step_event(4), Validation(step=4, loss=0.25, images=2), step_event(5), step_event(6),
                          Validation(step=6, loss=0.125, images=2),
                          RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"], resumed_from_step=4)])
    again = (step_event(5).to_json() + "\n").encode()
    with open(events, "ab") as handle:
        handle.write(again * ((2 << 20) // len(again)))  # more than the tail the table reads
    write_events(events, [RunFinished(status="stopped", step=5)])
    assert summarize_run(tmp_path, never_alive).validation_loss == 0.25


def test_reading_back_in_small_windows_cuts_no_line(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    write_events(events, [step_event(s) for s in range(1, 40)], tail='{"v": 1, "type": "step", "step"')
    expected = [e.to_json() for e in reversed(read_events(events))]
    for window in (7, 100, 333, 1 << 20):
        assert [e.to_json() for e in events_backwards(events, window=window)] == expected
    assert [e.step for e in events_backwards(events, limit=500)] == [39]  # one whole line in 500 bytes


def test_a_tensorboard_export_streams_the_file_with_progress(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    line = (step_event(5).to_json() + "\n").encode()
    events.write_bytes(line)
    list(stream_events(events))  # the readers' first use (imports, caches) is not what is measured
    events.write_bytes(line * ((1 << 20) // len(line)))
    size = events.stat().st_size
    seen: list[tuple[int, int]] = []
    count = 0
    tracemalloc.start()
    try:
        for _event in stream_events(events, lambda done, total: seen.append((done, total)), chunk_bytes=16 << 10):
            count += 1
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == size // len(line)
    assert seen[-1] == (size, size) and [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) > 10
    # Every event held at once would take more than the file's size (read_events: about 2.5 times).
    assert peak < size // 2, f"held {peak:,} bytes while streaming a {size:,}-byte file"


def test_studio_train_tensorboard_says_how_far_a_long_export_got(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    from studio.cli.runs import tensorboard as command

    run = tmp_path / "20260101-000000-old"
    write_events(run / "events.jsonl", [RunStarted(config={}, world_size=1, total_steps=3, devices=["cpu"]),
                                        *(step_event(s) for s in range(1, 4)), RunFinished(status="completed")])
    monkeypatch.setattr(command, "PROGRESS_EVERY_S", 0.0)
    args: Callable[..., Any] = type("Args", (), {})
    namespace = args()
    namespace.run_dirs, namespace.into = [str(run)], str(tmp_path / "tb")
    assert command.run(namespace) == 0
    err = capsys.readouterr().err
    assert f"{run}: read 100% of its events" in err
