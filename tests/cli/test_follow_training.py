"""`studio-train run` follows the training through its console.log: a dead terminal, a closed pipe or a
killed launcher never ends the run, and the last word is the studio's, not the launcher's traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from fixtures.holds import hold_at, release
from fixtures.waits import scaled_s

from studio.cli._follow import LauncherEpilogue, follow_training
from studio.core.runs.events import RunFinished, Step, read_events

ROOT = Path(__file__).resolve().parents[2]
FAKE_TRAINER = ROOT / "tests" / "fixtures" / "fake_trainer.py"
posix_only = pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX")

# A stand-in for `accelerate launch`: starts the trainer and waits for it.
LAUNCHER = """\
import subprocess, sys
sys.exit(subprocess.call([sys.executable, *sys.argv[1:]]))
"""


def _wait_for_step(run_dir: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + scaled_s(timeout)
    while time.monotonic() < deadline:
        events = run_dir / "events.jsonl"
        if events.is_file() and any(isinstance(e, Step) for e in read_events(events)):
            return
        time.sleep(0.05)
    raise AssertionError("the fake trainer never wrote a step")


def _last_line(path: Path) -> str:
    return path.read_text(encoding="utf-8").rstrip("\n").rsplit("\n", 1)[-1]


@posix_only
def test_a_killed_launcher_leaves_the_cli_following_the_trainer_to_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    hold_at(monkeypatch, 1)  # the trainer waits after step 1 until its launcher is dead
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")

    def kill_the_launcher() -> None:
        _wait_for_step(run_dir)
        for proc in psutil.Process().children():
            if str(launcher) in " ".join(proc.cmdline()):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        release(run_dir, 1)

    killer = threading.Thread(target=kill_the_launcher)
    killer.start()
    code = follow_training([sys.executable, str(launcher), str(FAKE_TRAINER), str(run_dir), "--steps", "30",
                            "--rate", "20"], run_dir)
    killer.join()
    out = capsys.readouterr().out
    assert code == 0  # the run's outcome, not the launcher's death
    assert "written: output/pytorch_lora_weights.safetensors" in out
    finished = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, RunFinished)]
    assert [f.status for f in finished] == ["completed"]
    assert _last_line(run_dir / "console.log").startswith("[studio] run completed at step 30")


# A launcher that dies the moment it has started the trainer (killed by the OOM killer, say): no
# poll of its children can see the trainer before it is orphaned.
DYING_LAUNCHER = """\
import os, signal, subprocess, sys
subprocess.Popen([sys.executable, *sys.argv[1:]])
os.kill(os.getpid(), signal.SIGKILL)
"""


@posix_only
def test_a_launcher_that_dies_as_it_starts_the_trainer_leaves_the_cli_following_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    launcher = tmp_path / "launcher.py"
    launcher.write_text(DYING_LAUNCHER, encoding="utf-8")
    code = follow_training([sys.executable, str(launcher), str(FAKE_TRAINER), str(run_dir), "--steps", "20",
                            "--rate", "40"], run_dir)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "written: output/pytorch_lora_weights.safetensors" in out
    finished = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, RunFinished)]
    assert [f.status for f in finished] == ["completed"]
    # The orphaned trainer was waited for: nothing of the run is left, not even a zombie.
    assert not [p for p in psutil.Process().children() if str(FAKE_TRAINER) in " ".join(_cmdline(p))]


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


FOLLOW = """\
import sys
from pathlib import Path
from studio.cli._follow import follow_training
run_dir = Path(sys.argv[1])
sys.exit(follow_training([sys.executable, sys.argv[2], str(run_dir), "--steps", "40", "--rate", "40"], run_dir))
"""


@posix_only
@pytest.mark.parametrize("how", ["head", "hang-up"])
def test_a_closed_terminal_or_pipe_ends_the_echo_not_the_training(tmp_path: Path, how: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`studio-train run cfg | head` (head leaves after a line) or the terminal window closed (SIGHUP,
    then nothing reads): the training goes on to its end."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    hold_at(monkeypatch, 1)  # the rest of the run is echoed only once the terminal is gone
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cli = subprocess.Popen([sys.executable, "-c", FOLLOW, str(run_dir), str(FAKE_TRAINER)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert cli.stdout is not None and cli.stderr is not None
    cli.stdout.readline()
    if how == "hang-up":
        cli.send_signal(signal.SIGHUP)
    cli.stdout.close()  # what `| head -1` does, and a closed terminal
    _wait_for_step(run_dir)
    release(run_dir, 1)
    try:
        err = cli.stderr.read().decode()
        cli.wait(timeout=scaled_s(60))
    finally:
        cli.stderr.close()
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
    finished = [e for e in read_events(run_dir / "events.jsonl") if isinstance(e, RunFinished)]
    assert [(f.status, f.step) for f in finished] == [("completed", 40)]
    assert _last_line(run_dir / "console.log").startswith("[studio] run completed at step 40")


TRAINER_CRASH = """\
Traceback (most recent call last):
  File "/x/studio/train/loop.py", line 3, in run
    step()
RuntimeError: boom
"""
LAUNCHER_TRACEBACK = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/accelerate/commands/launch.py", line 1000, in simple_launcher
    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)
subprocess.CalledProcessError: Command '['python', '-m', 'studio.train']' returned non-zero exit status 1.
"""


def test_the_launchers_traceback_is_held_back_and_the_trainers_is_shown() -> None:
    epilogue = LauncherEpilogue()
    shown = []
    for line in ("step 1: loss 0.5", *TRAINER_CRASH.splitlines(), "run failed at step 1: boom",
                 *LAUNCHER_TRACEBACK.splitlines(), "more from the launcher"):
        shown += epilogue.feed(line)
    shown += epilogue.flush()
    assert shown == ["step 1: loss 0.5", *TRAINER_CRASH.splitlines(), "run failed at step 1: boom"]


@pytest.mark.slow
@posix_only
def test_a_failed_run_ends_with_the_studios_reason_not_accelerates_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.core.runs.launch import prepare_run

    config = TrainConfig(model=ModelSection(family="sd15", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path="data")]))
    run_dir = prepare_run(resolve_paths(config, tmp_path)).run_dir
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(run_dir / "accelerate.yaml"),
               str(FAKE_TRAINER), str(run_dir), "--crash-at", "3"]
    code = follow_training(command, run_dir)
    captured = capfd.readouterr()
    assert code == 1
    shown = captured.out + captured.err
    assert "boom at step 3" in shown and "CalledProcessError" not in shown
    last = _last_line(run_dir / "console.log")
    assert last == ("[studio] run failed at step 3: crash: RuntimeError: boom at step 3 "
                    "(This is the fake trainer failing on purpose.)")
    assert "CalledProcessError" in (run_dir / "console.log").read_text()  # kept above it, for a bug report


class _WindowsOs:
    """The os module as _follow sees it on Windows."""

    name = "nt"

    def __getattr__(self, attribute: str) -> object:
        return getattr(os, attribute)


class _WindowsChild:
    """A launcher or rank as Windows lets it be signalled: SIGTERM (TerminateProcess) only."""

    pid = 4242

    def __init__(self) -> None:
        self.sent: list[int] = []

    def poll(self) -> None:
        return None

    def send_signal(self, signum: int) -> None:
        if signum != signal.SIGTERM:
            raise ValueError(f"Unsupported signal: {signum}")
        self.sent.append(signum)


class _Ranks:
    def __init__(self, ranks: list[_WindowsChild]) -> None:
        self.ranks = ranks

    def alive(self) -> list[_WindowsChild]:
        return self.ranks


def test_ctrl_c_on_windows_stops_the_run_at_its_next_step_and_twice_ends_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from studio.cli import _follow

    monkeypatch.setattr(_follow, "os", _WindowsOs())
    err = io.BytesIO()
    forwarder = _follow.SignalForwarder(tmp_path, _follow.Terminal(io.BytesIO(), err))
    launcher, rank = _WindowsChild(), _WindowsChild()
    forwarder.attach(launcher, _Ranks([rank]))  # type: ignore[arg-type]
    forwarder._forward(signal.SIGINT, None)  # the console's Ctrl+C reached the launcher and the ranks too
    assert (tmp_path / "STOP").is_file() and b"stopping at the next step" in err.getvalue()
    assert launcher.sent == [] and rank.sent == []
    forwarder._forward(signal.SIGINT, None)
    assert launcher.sent == [signal.SIGTERM] and rank.sent == [signal.SIGTERM]
    assert b"ended at once" in err.getvalue()
