"""The one line splitter and file tail: whole lines only, linear in the input, long lines skipped."""

from __future__ import annotations

from pathlib import Path

from studio.core.protocol.lines import LineBuffer, whole_lines
from studio.core.protocol.tail import ConsoleTail, FileTail


def test_lines_come_out_whole_whatever_the_chunks() -> None:
    data = b"one\ntwo\nthree\nfour (cut)"
    for size in (1, 2, 3, 5, 64):
        lines = LineBuffer()
        out = b"".join(whole_lines(lines.feed(data[i:i + size])) for i in range(0, len(data), size))
        assert out == b"one\ntwo\nthree\n" and lines.pending == len(b"four (cut)")
        assert lines.flush() == [b"four (cut)"]


def test_a_line_over_the_cap_is_skipped_and_counted_and_its_neighbours_pass() -> None:
    lines = LineBuffer(max_line=10)
    pieces = lines.feed(b"ok\n" + b"x" * 25)
    assert pieces == [b"ok\n"] and lines.pending == 25
    pieces = lines.feed(b"x" * 30 + b"\nfine\n" + b"y" * 40 + b"\nlast\n")
    assert pieces == [56, b"fine\n", 41, b"last\n"] and lines.skipped_lines == 2
    assert lines.pending == 0


def test_the_cap_counts_the_break_and_holds_in_a_chunk_of_many_lines() -> None:
    lines = LineBuffer(max_line=10)
    chunk = b"a\n" + b"x" * 9 + b"\n" + b"y" * 10 + b"\n" + b"b\n" * 8 + b"z" * 30 + b"\r\n" + b"end\n"
    assert lines.feed(chunk) == [b"a\n" + b"x" * 9 + b"\n", 11, b"b\n" * 8, 32, b"end\n"]
    console = LineBuffer(max_line=10, breaks=b"\r\n")
    assert console.feed(b"ok\n" + b"5%\r" * 20 + b"w" * 12 + b"\n") == [b"ok\n" + b"5%\r" * 20, 13]


def test_the_partial_line_of_an_endless_writer_stays_bounded() -> None:
    lines = LineBuffer(max_line=1000)
    for _ in range(10_000):
        assert lines.feed(b"z" * 100) == []
        assert len(lines._partial) <= 1000
    assert lines.flush() == [1_000_000] and lines.skipped_lines == 1


def test_a_file_tail_reads_at_most_its_cap_and_starts_again_when_the_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a\n" * 100)
    tail = FileTail(path, read_cap=50)
    assert whole_lines(tail.read()) == b"a\n" * 25 and tail.has_more()
    assert whole_lines(tail.read_all()) == b"a\n" * 75
    path.unlink()
    path.write_bytes(b"new\n")
    assert whole_lines(tail.read()) == b"new\n" and tail.restarted and tail.restarts == 1


def test_a_character_split_across_two_reads_is_decoded_once(tmp_path: Path) -> None:
    path = tmp_path / "console.log"
    text = "température 5 °C — ok\n".encode()
    cut = text.index("é".encode()) + 1  # inside the two bytes of é
    path.write_bytes(text[:cut])
    tail = ConsoleTail(path)
    first = tail.pump()
    with open(path, "ab") as handle:
        handle.write(text[cut:])
    second = tail.pump()
    assert first.lines == [] and second.lines == ["température 5 °C — ok"]
    assert "\ufffd" not in first.progress + "".join(second.lines)


def test_a_progress_bar_is_kept_apart_from_the_lines_and_only_its_last_drawing_is_held(tmp_path: Path) -> None:
    path = tmp_path / "console.log"
    path.write_bytes(b"loading\n" + b"".join(f"{i}/5000\r".encode() for i in range(5000)))
    tail = ConsoleTail(path)
    out = tail.pump()
    assert out.lines == ["loading"] and out.progress == "4999/5000"
    assert len(tail._rest) < 20  # the 4,999 earlier drawings are not kept
    with open(path, "ab") as handle:
        handle.write(b"5000/5000\ndone")
    out = tail.pump()
    assert out.lines == ["5000/5000"] and out.progress == "done"
    assert tail.finish().lines == ["done"]


def test_a_console_line_over_the_cap_is_said_to_be_left_out(tmp_path: Path) -> None:
    path = tmp_path / "console.log"
    path.write_bytes(b"before\n" + b"q" * 3_000_000 + b"\nafter\n")
    tail = ConsoleTail(path, read_cap=1 << 20, max_line=1 << 20)
    lines: list[str] = []
    for _ in range(5):
        lines += tail.pump().lines
    assert lines == ["before", "[studio] a console line of 3.0 MB was left out", "after"]


def test_a_console_keeps_the_text_after_the_last_carriage_return(tmp_path: Path) -> None:
    path = tmp_path / "console.log"
    path.write_bytes(b"a\r 50%\r100%\nplain\r\n\rsteps: 1\rsteps: 2")
    out = ConsoleTail(path).pump()
    assert out.lines == ["100%", "plain"]
    assert out.progress == "steps: 2"
