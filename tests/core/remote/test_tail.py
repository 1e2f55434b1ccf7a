"""The mirror of a remote file: whole lines, resumed at the right byte after a dropped connection.

The "connection" here is a small Python script that prints part of a file from the byte it is
asked for and then exits as ssh does when the network drops (status 255): the mirror must
start it again at the first byte it has not received, and end when the script exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import IO

from studio.core.protocol.streaming import ReconnectingStream
from studio.core.remote.tail import RemoteFileMirror
from studio.core.runs.events import Step, read_events

# Prints the file from byte OFFSET, at most LIMIT bytes (cutting a line in two), then "drops" (255)
# unless everything was sent.
_SERVER = r"""
import sys
path, offset, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()[offset:]
sys.stdout.buffer.write(data[:limit])
sys.stdout.flush()
sys.exit(0 if len(data) <= limit else 255)
"""


def _events_file(path: Path, steps: int) -> bytes:
    lines = [json.dumps({"v": 1, "type": "step", "time": 1.0 + i, "step": i, "epoch": 0, "loss": 0.5, "lr": 1e-4})
             for i in range(1, steps + 1)]
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    return data


def _server(remote: Path, limit: int, starts: list[int]) -> object:
    def start(offset: int, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        starts.append(offset)
        return subprocess.Popen([sys.executable, "-c", _SERVER, str(remote), str(offset), str(limit)],
                                stdout=subprocess.PIPE, stderr=stderr)

    return start


def test_a_dropped_connection_resumes_at_the_next_byte_without_losing_or_repeating_a_step(
    tmp_path: Path, monkeypatch: object
) -> None:
    import studio.core.protocol.streaming as streaming

    monkeypatch.setattr(streaming, "BACKOFF_S", (0.0,))  # type: ignore[attr-defined]
    remote = tmp_path / "there.jsonl"
    data = _events_file(remote, 40)
    local = tmp_path / "here" / "events.jsonl"
    starts: list[int] = []
    seen: list[bytes] = []
    mirror = RemoteFileMirror("test", local, _server(remote, 333, starts), before_lines=seen.extend)  # type: ignore[arg-type]
    mirror.start()
    assert mirror.wait(30)
    mirror.close()
    assert mirror.ended and mirror.stream.exit_code == 0
    assert local.read_bytes() == data  # byte for byte
    assert [e.step for e in read_events(local) if isinstance(e, Step)] == list(range(1, 41))
    assert starts == list(range(0, len(data), 333))  # each start at the first byte not yet received
    assert mirror.reconnects == len(starts) - 1 >= 5
    assert b"".join(seen) == data  # every whole line went through the hook once, in order


def test_a_restarted_mirror_continues_from_the_local_file(tmp_path: Path) -> None:
    remote = tmp_path / "there.jsonl"
    data = _events_file(remote, 10)
    local = tmp_path / "events.jsonl"
    half = data[: data.index(b"\n", len(data) // 2) + 1]
    local.write_bytes(half)  # what an earlier session of the studio had received
    starts: list[int] = []
    mirror = RemoteFileMirror("test", local, _server(remote, 10**6, starts))  # type: ignore[arg-type]
    mirror.start()
    assert mirror.wait(30)
    mirror.close()
    assert starts == [len(half)] and local.read_bytes() == data


def test_a_last_line_without_newline_is_kept_when_the_writer_is_gone(tmp_path: Path) -> None:
    remote = tmp_path / "there.log"
    remote.write_bytes(b"one\ntwo\nthree (cut)")
    local = tmp_path / "console.log"
    mirror = RemoteFileMirror("test", local, _server(remote, 10**6, []))  # type: ignore[arg-type]
    mirror.start()
    assert mirror.wait(30)
    mirror.close()
    assert local.read_bytes() == b"one\ntwo\nthree (cut)"


def test_a_stream_that_cannot_start_ends_and_says_why(tmp_path: Path) -> None:
    def start(stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen([str(tmp_path / "no-such-program")], stdout=subprocess.PIPE, stderr=stderr)

    stream = ReconnectingStream("nothing", start, lambda _chunk: None)
    stream.start()
    assert stream.wait(10)
    assert stream.ended and "cannot start" in stream.error and "no-such-program" in stream.error


def test_close_ends_a_command_that_never_finishes(tmp_path: Path) -> None:
    def start(stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        # One write of the whole line: print() may write "x" and "\n" apart (two write calls), and a
        # test that closed the stream at the first chunk then saw only b"x" (a CI run did).
        program = "import os, time; os.write(1, b'x\\n'); time.sleep(600)"
        return subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=stderr)

    chunks: list[bytes] = []
    stream = ReconnectingStream("forever", start, chunks.append)
    stream.start()
    for _ in range(600):  # until the whole line arrived (30 s at most)
        if b"\n" in b"".join(chunks):
            break
        stream.wait(0.05)
    stream.close()
    assert not stream.running and b"".join(chunks) == b"x\n" and not stream.ended


def test_a_50_mb_line_without_newline_passes_through_the_mirror_in_under_a_second_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """A broken or hostile remote: one endless line. Each chunk is searched once and nothing is held."""
    import time
    import tracemalloc

    local = tmp_path / "events.jsonl"
    mirror = RemoteFileMirror("test", local, _server(tmp_path / "unused", 1, []))  # type: ignore[arg-type]
    good = b'{"v":1,"type":"step","time":1.0,"step":1,"epoch":0,"loss":0.5,"lr":0.0001}\n'
    chunk = b"x" * (64 * 1024)  # what ReconnectingStream hands over per read
    tracemalloc.start()
    began = time.process_time()
    mirror._on_data(good)
    for _ in range(50 * 16):  # 50 MB
        mirror._on_data(chunk)
    mirror._on_data(b"\n" + good)
    seconds = time.process_time() - began
    _size, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    mirror.close()
    assert seconds < 1.0
    assert peak < 8 * 2**20  # never the line: at most the 1 MB cap and a chunk or two
    assert mirror.skipped_lines == 1
    # The local file stays as long as what was received (the next start resumes there); the long line is a
    # hole that readers skip as one garbage line, and the events on either side of it arrive.
    assert local.stat().st_size == mirror.received == 2 * len(good) + 50 * 2**20 + 1
    from studio.core.runs.tail import EventTail

    tail = EventTail(local, max_bytes=4 * 2**20)
    assert [e.step for e in tail.finish() if isinstance(e, Step)] == [1, 1] and tail.garbage_lines == 1


def test_a_long_line_cut_by_dropped_connections_is_left_out_and_the_mirror_resumes_after_it(
    tmp_path: Path, monkeypatch: object
) -> None:
    import studio.core.protocol.streaming as streaming

    monkeypatch.setattr(streaming, "BACKOFF_S", (0.0,))  # type: ignore[attr-defined]
    remote = tmp_path / "there.jsonl"
    data = _events_file(remote, 3)
    data += b"y" * 3_000_000 + b"\n" + data
    remote.write_bytes(data)
    local = tmp_path / "here" / "events.jsonl"
    starts: list[int] = []
    mirror = RemoteFileMirror("test", local, _server(remote, 700_000, starts))  # type: ignore[arg-type]
    mirror.start()
    assert mirror.wait(60)
    mirror.close()
    assert mirror.ended and mirror.skipped_lines == 1
    assert local.stat().st_size == len(data) and starts == list(range(0, len(data), 700_000))
    assert [e.step for e in read_events(local) if isinstance(e, Step)] == [1, 2, 3, 1, 2, 3]


def test_a_second_follower_of_the_same_run_is_refused_instead_of_doubling_every_step(tmp_path: Path) -> None:
    """The studio follows a remote run and `studio-train remote watch` is started on it too: the second
    mirror must not append the same lines again (the loss plot would show each step twice, and a later
    resume would start past the end); it is refused, saying why. Once the first is closed, it may follow."""
    import pytest

    from studio.core.remote.ssh import RemoteError

    remote = tmp_path / "remote.jsonl"
    _events_file(remote, 5)
    local = tmp_path / "run" / "events.jsonl"
    first = RemoteFileMirror("box events", local, _server(remote, 1 << 20, []))  # type: ignore[arg-type]
    with pytest.raises(RemoteError, match=r"being kept up to date already .*one follower at a time"):
        RemoteFileMirror("box events", local, _server(remote, 1 << 20, []))  # type: ignore[arg-type]
    first.start()
    assert first.wait(20)
    first.close()
    second = RemoteFileMirror("box events", local, _server(remote, 1 << 20, []))  # type: ignore[arg-type]
    second.start()
    assert second.wait(20)
    second.close()
    assert local.read_bytes() == remote.read_bytes()
