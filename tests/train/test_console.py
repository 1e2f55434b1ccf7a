"""The trainer owns its console log: a dead terminal or pipe, a hang-up or a full disk never end the
training, and the record of a failure is written before anything is printed."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from studio.core.runs.events import Error, read_events
from studio.train.progress.reporting import Reporter

ROOT = Path(__file__).resolve().parents[2]

# A rank whose output is a pipe nobody reads any more (the CLI was killed, `| head` left), hung up on.
RANK = """\
import os, signal, sys
from pathlib import Path
run_dir = Path(sys.argv[1])
from studio.train.progress.console import own_console
own_console(run_dir)
print("step 1: loss 0.5", flush=True)
os.kill(os.getpid(), signal.SIGHUP)  # the terminal closed
for step in range(2, 200):
    print(f"step {step}: loss 0.5", flush=True)
print("saving checkpoint at step 199", file=sys.stderr, flush=True)
(run_dir / "done").write_text("the rank lived on")
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGHUP and broken pipes are POSIX")
def test_a_rank_outlives_its_closed_pipe_and_a_hang_up_and_logs_every_line(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads: every write to the pipe fails with EPIPE
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", RANK, str(tmp_path)], stdout=write_end, stderr=write_end,
                          env=env, timeout=60, check=False)
    os.close(write_end)
    assert done.returncode == 0
    assert (tmp_path / "done").read_text() == "the rank lived on"
    lines = (tmp_path / "console.log").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "step 1: loss 0.5" and lines[-1] == "saving checkpoint at step 199"
    assert len(lines) == 200


def test_a_rank_started_into_the_log_file_writes_each_line_once(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(tmp_path / "console.log", "ab") as log:  # how studio-train run and the studio start it
        subprocess.run([sys.executable, "-c", RANK.replace("os.kill(os.getpid(), signal.SIGHUP)", "pass"),
                        str(tmp_path)], stdout=log, stderr=subprocess.STDOUT, env=env, timeout=60, check=True)
    lines = (tmp_path / "console.log").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200 and lines.count("step 7: loss 0.5") == 1


class _Gone(io.StringIO):
    """A stream whose reader is gone: every write fails as on a closed pipe."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def test_a_crash_is_recorded_even_when_stderr_is_a_dead_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", _Gone())
    monkeypatch.setattr(sys, "stdout", _Gone())
    reporter = Reporter(tmp_path, active=True)
    try:
        raise RuntimeError("boom while saving checkpoint at step 25")
    except RuntimeError as exc:
        reporter.crash(exc)
    reporter.close()
    (error,) = [e for e in read_events(tmp_path / "events.jsonl") if isinstance(e, Error)]
    assert error.kind == "crash" and "boom while saving checkpoint at step 25" in error.message


def test_the_error_that_ends_another_rank_is_said_on_the_console(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Rank 1's GPU runs out of memory: the run ends, rank 0 is ended before it writes anything, and
    console.log (the ranks' stderr) is the only place that can say why."""
    reporter = Reporter(tmp_path, active=False, rank=1)
    reporter.error("oom", "the GPU ran out of memory: Tried to allocate 2.00 GiB", "lower training.batch_size")
    reporter.close()
    err = capsys.readouterr().err
    assert "rank 1: error (oom): the GPU ran out of memory: Tried to allocate 2.00 GiB" in err
    assert "lower training.batch_size" in err
    assert not (tmp_path / "events.jsonl").exists()  # the record stays rank 0's


# What a rank says about a Windows person's files: an accented user name, a folder named in Chinese, and the studio's
# own arrows ("Tools → Training Environment"), none of which the ANSI code page of a Western Windows holds all of.
NAMES = """\
import sys
from pathlib import Path
run_dir = Path(sys.argv[1])
from studio.train.progress.console import own_console
own_console(run_dir)
print("[loading] loading C:\\\\Users\\\\Jürgen\\\\models\\\\风景 → 0/1", flush=True)
print("step 1: loss 0.5", flush=True)
print("warning: set it up in Tools → Training Environment", file=sys.stderr, flush=True)
print("step 2: loss 0.4", flush=True)
"""


@pytest.mark.parametrize("started", ["into the log", "through a terminal"])
def test_the_console_log_holds_a_windows_persons_names_and_every_line_after_them(tmp_path: Path,
                                                                                started: str) -> None:
    """On Windows, Python writes a redirected output in the system's code page (PYTHONIOENCODING=cp1252 here
    stands in for it): console.log, which the studio reads as UTF-8, showed Jürgen garbled, and the first
    character the code page lacks silenced the rank's output for the rest of the run."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="cp1252")
    if started == "into the log":  # how studio-train run and the studio start it
        with open(tmp_path / "console.log", "ab") as log:
            subprocess.run([sys.executable, "-c", NAMES, str(tmp_path)], stdout=log, stderr=subprocess.STDOUT,
                           env=env, timeout=60, check=True)
        shown = ""
    else:  # its output on a pipe (a terminal, `| tee`), console.log written by the rank itself
        shown = subprocess.run([sys.executable, "-c", NAMES, str(tmp_path)], capture_output=True, env=env,
                               timeout=60, check=True).stdout.decode("cp1252")
    lines = (tmp_path / "console.log").read_text(encoding="utf-8").splitlines()
    assert lines == ["[loading] loading C:\\Users\\Jürgen\\models\\风景 → 0/1", "step 1: loss 0.5",
                     "warning: set it up in Tools → Training Environment", "step 2: loss 0.4"]
    if started == "through a terminal":  # the terminal keeps every line, what it cannot show escaped
        assert shown.splitlines() == ["[loading] loading C:\\Users\\Jürgen\\models\\\\u98ce\\u666f \\u2192 0/1",
                                      "step 1: loss 0.5", "step 2: loss 0.4"]
