"""Following a training from the terminal: `studio-train run` and `resume` start the launcher and
show the run's console.log as it grows.

The launcher's output goes into RUN_DIR/console.log, a file: no pipe connects the trainer to
this process, so a closed terminal (SIGHUP), `| head` or a killed CLI cannot end the training.
This process follows the training, not the launcher: if the launcher dies first, it waits for
the trainer it started. Its exit code is the run's outcome, and its last words (also the last
line of console.log) are the studio's one-line account of it, not accelerate's traceback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

import psutil

from studio.cli._trainer_watch import TrainerWatch, adopting_orphans
from studio.core.exit_codes import EXIT_FAILED, EXIT_INVALID, EXIT_OK, signal_exit_code
from studio.core.protocol.tail import ConsoleTail
from studio.core.quoting import command_line
from studio.core.runs.folders import CONSOLE_FILE, EVENTS_FILE, request_stop
from studio.core.runs.launch import training_env
from studio.core.runs.records.outcome import last_finish, outcome_line
from studio.core.runs.scheduling.lock import RunLockedError, lock_holder, write_process_file

POLL_S = 0.1
# Frames of accelerate's launcher (and torchrun's): a traceback through them is its epilogue.
LAUNCHER_FRAMES = ("accelerate/commands/", "accelerate\\commands\\", "torch/distributed/run.py",
                   "torch\\distributed\\run.py")


class Terminal:
    """Where the CLI writes; once the reader is gone (closed terminal, `| head`) it writes nothing more."""

    def __init__(self, out: BinaryIO | None = None, err: BinaryIO | None = None) -> None:
        self.out = out or sys.stdout.buffer
        self.err = err or sys.stderr.buffer
        self.gone = False

    def write(self, data: bytes, error: bool = False) -> None:
        if self.gone or not data:
            return
        stream = self.err if error else self.out
        try:
            stream.write(data)
            stream.flush()
        except (OSError, ValueError):
            self.hang_up()

    def line(self, text: str, error: bool = False) -> None:
        self.write((text + "\n").encode("utf-8", "backslashreplace"), error)

    def hang_up(self) -> None:
        """Stop writing; buffered text and later prints go to /dev/null instead of failing at exit."""
        self.gone = True
        for stream in (sys.stdout, sys.stderr):
            try:
                fd = stream.fileno()
            except (OSError, ValueError, AttributeError):
                continue
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)


class LauncherEpilogue:
    """Holds each traceback back until it is whole; one raised by the launcher is dropped, with all after it.

    accelerate's launcher ends a failed run with a traceback of its own (CalledProcessError,
    ChildFailedError) after the trainer has already told why it failed; it says nothing a
    person can act on. The trainer's own tracebacks (a crash) pass unchanged.
    """

    def __init__(self) -> None:
        self.block: list[str] = []
        self.silenced = False

    def feed(self, line: str) -> list[str]:
        if self.silenced:
            return []
        if not self.block:
            if line.startswith("Traceback (most recent call last):"):
                self.block = [line]
                return []
            return [line]
        self.block.append(line)
        if line[:1] in (" ", "\t") or not line.strip():
            return []  # a frame, its source line, or a blank line inside the traceback
        block, self.block = self.block, []
        if any(frame in text for text in block for frame in LAUNCHER_FRAMES):
            self.silenced = True
            return []
        return block

    def flush(self) -> list[str]:
        block, self.block = self.block, []
        return [] if self.silenced else block


class ConsoleEcho:
    """Copies what is appended to console.log onto the terminal, complete lines only (the protocol's
    ConsoleTail: a bounded read per call, a progress bar shown as its last drawing)."""

    def __init__(self, path: Path, offset: int, terminal: Terminal) -> None:
        self.tail = ConsoleTail(path, offset=offset)
        self.terminal = terminal
        self.filter = LauncherEpilogue()

    def show_new(self) -> None:
        self._show(self.tail.pump().lines)

    def finish(self) -> None:
        self._show(self.tail.finish().lines)
        self._show_decoded(self.filter.flush())

    def _show(self, lines: list[str]) -> None:
        shown: list[str] = []
        for line in lines:
            shown.extend(self.filter.feed(line))
        self._show_decoded(shown)

    def _show_decoded(self, lines: list[str]) -> None:
        if lines:
            self.terminal.write(("\n".join(lines) + "\n").encode("utf-8", "replace"))


class SignalForwarder:
    """SIGTERM/SIGINT: ask the trainer to stop at its next step (a second one ends it at once).
    SIGHUP (the terminal closed): stop writing to it and keep following the run.

    Installed before the launcher starts: a signal that lands while it starts asks the run to stop
    (the STOP file) and is sent to the launcher's group once it exists (`attach`), instead of ending
    this process by the default action while the trainer, in a group of its own, goes on."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, run_dir: Path, terminal: Terminal) -> None:
        self.run_dir, self.terminal = run_dir, terminal
        self.process: subprocess.Popen[bytes] | None = None
        self.watch: TrainerWatch | None = None
        self.count = 0
        self.held: int | None = None  # a signal that came before the launcher existed
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in self.SIGNALS:
            self._previous[signum] = signal.signal(signum, self._forward)
        if hasattr(signal, "SIGHUP"):
            self._previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._hang_up)

    def attach(self, process: subprocess.Popen[bytes], watch: TrainerWatch) -> None:
        """The launcher now exists: a signal held while it started goes to it."""
        self.process, self.watch = process, watch
        held, self.held = self.held, None
        if held is not None:
            self._send(held)

    def uninstall(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _hang_up(self, signum: int, frame: FrameType | None) -> None:
        self.terminal.hang_up()

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            self._send(signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
            self.terminal.line("\nended at once", error=True)
            return
        request_stop(self.run_dir)  # every rank reads it, wherever the signal does not reach
        self._send(signum)
        self.terminal.line(f"\n{signal.Signals(signum).name}: stopping at the next step (saving a checkpoint); "
                           "send it again (Ctrl+C) to end the run at once", error=True)

    def _send(self, signum: int) -> None:
        """To the launcher's process group and to every rank it started (they may sit in sessions of their own);
        held until `attach` while the launcher is starting."""
        if self.process is None or self.watch is None:
            self.held = signum
            return
        if os.name == "posix":
            with contextlib.suppress(ProcessLookupError, PermissionError):  # the group already ended
                os.killpg(self.process.pid, signum)
        elif signum != signal.SIGTERM:
            # Windows sends no SIGINT to a process; the console's Ctrl+C already reached the launcher and
            # every rank (they share this console), and the STOP file reaches the rest.
            return
        elif self.process.poll() is None:
            self.process.send_signal(signum)
        for proc in self.watch.alive():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signum)


def follow_training(command: list[str], run_dir: Path) -> int:
    """Start `command` (the launcher) for `run_dir`, show its console and wait for the whole run; its exit code."""
    with adopting_orphans() as earlier:
        return _follow(command, run_dir, earlier)


def _follow(command: list[str], run_dir: Path, earlier: set[int]) -> int:
    console = run_dir / CONSOLE_FILE
    offset = console.stat().st_size if console.exists() else 0
    options: dict[str, Any] = {"process_group": 0} if os.name == "posix" else {}
    terminal = Terminal()
    forwarder = SignalForwarder(run_dir, terminal)
    forwarder.install()
    try:
        try:
            with open(console, "ab") as log:
                process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           env=training_env(), cwd=run_dir, **options)
        except OSError as exc:
            terminal.line(f"error: cannot start {command[0]} ({exc.strerror or exc}); check launch.python in "
                          f"{run_dir / 'config.toml'}", error=True)
            return EXIT_INVALID
        watch = TrainerWatch(process.pid, run_dir, earlier)
        forwarder.attach(process, watch)
        write_process_file(run_dir, process.pid)  # a second resume is refused while this one starts
        echo = ConsoleEcho(console, offset, terminal)
        while process.poll() is None:
            watch.remember()
            echo.show_new()
            time.sleep(POLL_S)
        while watch.alive():  # the launcher is gone but the trainer it started is not: follow the trainer
            echo.show_new()
            time.sleep(POLL_S)
    finally:
        forwarder.uninstall()
    echo.finish()
    holder = lock_holder(run_dir)
    if process.returncode == EXIT_FAILED and holder is not None and holder.pid != process.pid:
        # Refused: another trainer holds the run. Its console.log is its own: nothing is added to it.
        terminal.line(f"error: {RunLockedError(run_dir, holder)}", error=True)
        return EXIT_FAILED
    return report_outcome(run_dir, signal_exit_code(process.returncode), terminal)


def report_outcome(run_dir: Path, launcher_code: int, terminal: Terminal | None = None) -> int:
    """Say what the run left (outputs, how to continue, or why it failed) and end its console with
    the studio's one line; the run's exit code."""
    terminal = terminal or Terminal()
    finished, _error = last_finish(run_dir)
    line = outcome_line(run_dir, launcher_code)
    try:
        with open(run_dir / CONSOLE_FILE, "a", encoding="utf-8", errors="backslashreplace") as console:
            console.write(line + "\n")
    except OSError as exc:  # a full disk: the terminal still hears it
        terminal.line(f"(cannot add to {run_dir / CONSOLE_FILE}: {exc})", error=True)
    if finished is not None and finished.status == "completed":
        readers = _readers(run_dir)
        for output in finished.outputs:
            terminal.line(f"written: {output}" + (f"  (for {r})" if (r := readers(output)) else ""))
        return EXIT_OK
    if finished is not None and finished.status == "stopped":
        terminal.line(f"stopped at step {finished.step}; continue with: {command_line(['studio-train', 'resume', str(run_dir)])}")
        return EXIT_OK
    terminal.line(line.split("] ", 1)[-1] + f" (events: {run_dir / EVENTS_FILE})", error=True)
    return launcher_code or EXIT_FAILED


def _readers(run_dir: Path) -> Any:
    """output -> the programs it is for (core/families/readers.py), from the run's own config."""
    from studio.core.config.errors import ConfigError
    from studio.core.config.files.toml_file import load_config
    from studio.core.families.readers import readers_of

    try:
        config = load_config(run_dir / "config.toml")
    except (ConfigError, OSError):
        return lambda output: ""
    method = config.method
    return lambda output: readers_of(output, config.model.family, method.kind, method.network, method.use_dora)
