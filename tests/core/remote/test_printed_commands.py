"""Every command the studio prints for a person to paste is shell-quoted: a project folder named
`$(...)`, with backticks or `;&|`, stays a name when pasted (nothing it holds runs)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from studio.core.remote.control import RemoteRunRecord
from studio.core.remote.start import RemoteStart
from studio.core.runs.events import RunFinished
from studio.core.runs.records.outcome import outcome_line

HOSTILE = "proj $(touch PWNED1) `touch PWNED2`; touch PWNED3 & | x"


def _pasted(line: str, tmp_path: Path) -> list[str]:
    """What the shell hands studio-train when `line` (from `studio-train` on) is pasted."""
    command = line[line.index("studio-train"):].split("   (")[0]
    shown = subprocess.run(["sh", "-c", f"printf '%s\\n' {command[len('studio-train '):]}"], cwd=tmp_path,
                           capture_output=True, text=True, check=True)
    assert not list(tmp_path.glob("PWNED*")), f"pasting {command!r} ran a command"
    return shown.stdout.splitlines()


def test_the_watch_stop_and_pull_lines_paste_as_they_read(tmp_path: Path) -> None:
    local = tmp_path / HOSTILE / "runs" / "20250101-000000-x"
    record = RemoteRunRecord("box", "me@host", "/w/b", "/w/run", "/w/pid", "/w/status", "/w/log", "nohup",
                             "rsync", 4, 0.0)
    sent = SimpleNamespace(report=SimpleNamespace(copied=["a"], unchanged=0), images_copied=0, dataset_files=0)
    start = RemoteStart(record, local, SimpleNamespace(), sent, "", "ssh me@host")  # type: ignore[arg-type]
    lines = [line for line in start.summary().splitlines() if "studio-train remote" in line]
    assert len(lines) == 3
    for line in lines:
        assert _pasted(line, tmp_path)[-1] == str(local)


@pytest.mark.parametrize("status", ["stopped", None])
def test_the_resume_line_pastes_as_it_reads(tmp_path: Path, status: str | None) -> None:
    run_dir = tmp_path / HOSTILE / "runs" / "r"
    run_dir.mkdir(parents=True)
    if status:
        (run_dir / "events.jsonl").write_text(RunFinished(status=status, step=3).to_json() + "\n")
    line = outcome_line(run_dir, 1)
    assert "studio-train resume" in line
    assert _pasted(line, tmp_path) == ["resume", str(run_dir)]
    assert shlex.quote(str(run_dir)) in line
