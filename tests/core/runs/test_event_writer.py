"""The events writer on a full disk: a reserve for the run's end, cut lines completed, never glued."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from studio.core.runs.event_writer import RESERVE_BYTES
from studio.core.runs.events import Error, EventWriter, RunFinished, Step, read_events


def _step(n: int) -> Step:
    return Step(step=n, epoch=0, loss=0.5, lr=1e-4, samples_per_s=1.0)


@pytest.mark.parametrize("windows", [False, True], ids=["posix", "windows"])
def test_a_line_cut_by_a_full_disk_or_a_kill_gets_a_new_line_before_the_next_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, windows: bool) -> None:
    if windows:
        monkeypatch.delattr(os, "pread", raising=False)  # POSIX only
    path = tmp_path / "events.jsonl"
    with EventWriter(path) as writer:
        writer.write(_step(1))
    whole = path.read_bytes()
    path.write_bytes(whole + whole[:20])  # the second line cut after 20 bytes
    with EventWriter(path) as writer:  # resume
        writer.write(RunFinished(status="completed", step=2))
    assert [type(e).__name__ for e in read_events(path)] == ["Step", "RunFinished"]
    assert path.read_bytes().splitlines()[1] == whole[:20]  # the cut line stands alone, the next one is whole


def test_the_reserve_holds_the_rest_of_a_cut_line_and_the_runs_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, flush_interval=0.0)
    assert writer.reserve.stat().st_size == RESERVE_BYTES
    writer.write(_step(1))
    real_write = os.write
    room = [30]  # the disk has 30 bytes left

    def full_disk(fd: int, data: bytes) -> int:
        if room[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        written = real_write(fd, bytes(data)[: room[0]])
        room[0] -= written
        return written

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match="No space"):
        writer.write(_step(2))
    assert not path.read_bytes().endswith(b"\n")  # the line is cut
    assert writer.release_reserve() and not writer.reserve.exists()
    room[0] = RESERVE_BYTES
    writer.flush()  # the rest of the cut line
    writer.write(Error(kind="disk_full", message="the disk is full"))
    writer.write(RunFinished(status="failed", message="the disk is full"))
    writer.close()
    assert [getattr(e, "step", None) or e.type for e in read_events(path)] == [1, 2, "error", "run_finished"]
