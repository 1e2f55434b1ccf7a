"""Commands the studio runs: one QProcess wrapper, one outcome type, stop and kill of the whole tree.

Two modes, one wrapper (as qutebrowser has one GUIProcess):
- a console file (`start`): stdout and stderr go straight into a file, not a pipe, so
  nothing a command prints is lost if the studio goes away; its lines are read back
  with the protocol's `ConsoleTail`. The trainer (`TrainerProcess`) and the demo's
  tiny-model builder run this way.
- JSON lines on stdout (`start_messages`): each line is read with a `Protocol` and
  arrives as one typed message (`sig_message`); a malformed line is skipped and counted;
  stderr's last words explain a failure. The captioner and downloads run this way.

Every command ends with exactly one `sig_finished(Outcome)`, whether it exited, crashed,
could not start, was killed or was left running.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import psutil
from PySide6.QtCore import QIODevice, QObject, QProcess, QProcessEnvironment, QTimer, Signal

from studio.core.app_words import desktop_app_env
from studio.core.protocol.jsonlines import Protocol, UnknownMessage
from studio.core.protocol.lines import LineBuffer
from studio.core.protocol.tail import ConsoleTail, ConsoleText
from studio.core.runs.ending import end_tree, find_tree
from studio.core.runs.launch import format_command

log = logging.getLogger(__name__)

STDERR_KEPT = 4000  # characters of a JSON-lines command's stderr kept to explain a failure


@dataclass(frozen=True)
class Outcome:
    """How a command ended."""

    code: int  # its exit code (-1 when it never started)
    how: str  # "normal" | "crashed" | "failed to start" | "detached"
    message: str = ""  # why it could not start
    stderr: str = ""  # JSON-lines mode: the last words of its stderr

    @property
    def ok(self) -> bool:
        return self.code == 0 and self.how == "normal"

    def last_words(self) -> str:
        """The last line the command wrote on stderr ("" when none)."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


class CommandProcess(QObject):
    """Runs one command at a time and reports what it does (qutebrowser's GUIProcess style)."""

    sig_started = Signal()
    sig_finished = Signal(object)  # Outcome
    sig_error = Signal(str)
    sig_output = Signal(str)  # console mode: finished console lines
    sig_progress = Signal(str)  # console mode: the line a progress bar is redrawing
    sig_message = Signal(object)  # JSON-lines mode: one typed message of the protocol

    def __init__(self, parent: QObject | None = None, poll_ms: int = 200) -> None:
        super().__init__(parent)
        self.command: list[str] = []
        self.console_path: Path | None = None
        self.killed = False
        self.malformed_lines = 0  # JSON-lines mode: lines that were JSON but not a valid message
        self._process: QProcess | None = None
        self._console: ConsoleTail | None = None
        self._protocol: Protocol | None = None
        self._lines = LineBuffer()
        self._stderr = ""
        self._tree: list[psutil.Process] = []
        self._poll = QTimer(self)
        self._poll.setInterval(poll_ms)
        self._poll.timeout.connect(self._pump_console)
        self._kill_timer = QTimer(self, singleShot=True)
        self._kill_timer.timeout.connect(self._kill_after_grace)

    # ------------------------------------------------------------ state
    def is_running(self) -> bool:
        return self._process is not None

    def pid(self) -> int:
        return int(self._process.processId()) if self._process is not None else 0

    # ------------------------------------------------------------ start
    def start(self, command: list[str], console: Path, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> bool:
        """Start `command` with its output appended to `console`; refused (False, sig_error) while one runs."""
        if not self._begin(command):
            return False
        self.console_path = console
        with open(console, "a", encoding="utf-8") as handle:
            handle.write(f"$ {format_command(self.command)}\n")
        self._console = ConsoleTail(console, offset=console.stat().st_size)
        proc = self._make(cwd, env)
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        proc.setStandardOutputFile(str(console), QIODevice.OpenModeFlag.Append)
        self._launch(proc)
        return True

    def start_messages(self, command: list[str], protocol: Protocol, cwd: Path | None = None,
                       env: dict[str, str] | None = None) -> bool:
        """Start `command`, reading its stdout as JSON lines of `protocol` (each one a `sig_message`)."""
        if not self._begin(command):
            return False
        self.console_path = None
        self._protocol = protocol
        proc = self._make(cwd, {"PYTHONUNBUFFERED": "1", **(env or {})})  # each line arrives as it is printed
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.SeparateChannels)
        proc.readyReadStandardOutput.connect(self._read_stdout)
        proc.readyReadStandardError.connect(self._read_stderr)
        self._launch(proc)
        return True

    def _begin(self, command: list[str]) -> bool:
        refusal = self.refusal(command)
        if refusal:
            self.sig_error.emit(refusal)
            return False
        self.command = list(command)
        self.killed = False
        self.malformed_lines = 0
        self._console, self._protocol = None, None
        self._lines, self._stderr = LineBuffer(), ""
        self._tree = []
        return True

    def _make(self, cwd: Path | None, env: dict[str, str] | None) -> QProcess:
        proc = QProcess(self)
        if cwd is not None:
            proc.setWorkingDirectory(str(cwd))
        env = {**(env or {}), **desktop_app_env()}  # the desktop app's children name its buttons in messages
        if env:
            qenv = QProcessEnvironment.systemEnvironment()
            for key, value in env.items():
                qenv.insert(key, value)
            proc.setProcessEnvironment(qenv)
        program, args = self.program_and_arguments(self.command)
        proc.setProgram(program)
        proc.setArguments(args)
        return proc

    def _launch(self, proc: QProcess) -> None:
        proc.started.connect(self._on_started)
        proc.finished.connect(self._on_finished)
        proc.errorOccurred.connect(self._on_error)
        self._process = proc
        proc.start()

    def refusal(self, command: list[str]) -> str:
        """Why `command` cannot start now ("" when it can)."""
        if self._process is not None:
            return self.busy_message()
        if not command:
            return "There is no command to start (empty command line)."
        return ""

    def program_and_arguments(self, command: list[str]) -> tuple[str, list[str]]:
        """What QProcess starts for `command` (the trainer puts its launcher in between)."""
        return command[0], command[1:]

    def busy_message(self) -> str:
        return f"'{format_command(self.command)}' is still running."

    def start_failure_message(self, reason: str) -> str:
        return f"Could not start '{self.command[0]}': {reason}."

    def _on_started(self) -> None:
        if self._console is not None:
            self._poll.start()
        self.sig_started.emit()

    def _on_error(self, error: QProcess.ProcessError) -> None:
        proc = self._process
        if proc is None or error != QProcess.ProcessError.FailedToStart:
            return  # crashes also end in finished(), which reports them
        message = self.start_failure_message(proc.errorString())
        self._append_console(f"[studio] {message}\n")
        self._cleanup()
        self.sig_error.emit(message)
        self.sig_finished.emit(Outcome(-1, "failed to start", message=message))

    def _on_finished(self, exit_code: int, status: QProcess.ExitStatus) -> None:
        if self._process is None:
            return
        if self._console is not None:
            self._emit_console(self._console.finish())
        else:
            self._read_stdout()
            self._read_stderr()
            self._messages(self._lines.flush())
        crashed = status == QProcess.ExitStatus.CrashExit
        self._cleanup()
        self.sig_finished.emit(Outcome(int(exit_code), "crashed" if crashed else "normal", stderr=self._stderr))

    def _cleanup(self) -> None:
        self._poll.stop()
        self._kill_timer.stop()
        proc, self._process = self._process, None
        if proc is not None:
            proc.deleteLater()

    # ------------------------------------------------------------ console mode
    def _append_console(self, text: str) -> None:
        if self.console_path is not None:
            try:
                with open(self.console_path, "a", encoding="utf-8") as handle:
                    handle.write(text)
            except OSError:
                pass

    def _pump_console(self) -> None:
        if self._console is not None:
            self._emit_console(self._console.pump())

    def _emit_console(self, text: ConsoleText) -> None:
        if text.lines:
            self.sig_output.emit("\n".join(text.lines))
        if text.progress:
            self.sig_progress.emit(text.progress)

    def console_tail(self, chars: int) -> str:
        """The last `chars` characters of the console file (for a one-line report of a failure)."""
        if self.console_path is None:
            return ""
        try:
            with open(self.console_path, "rb") as handle:
                handle.seek(max(0, self.console_path.stat().st_size - 4 * chars))
                return handle.read().decode("utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    # ------------------------------------------------------------ JSON-lines mode
    def _read_stdout(self) -> None:
        if self._process is not None and self._protocol is not None:
            self._messages(self._lines.feed(bytes(self._process.readAllStandardOutput().data())))

    def _read_stderr(self) -> None:
        if self._process is not None and self._protocol is not None:
            text = bytes(self._process.readAllStandardError().data()).decode("utf-8", errors="replace")
            self._stderr = (self._stderr + text)[-STDERR_KEPT:]

    def _messages(self, pieces: list[bytes | int]) -> None:
        protocol = self._protocol
        if protocol is None:
            return
        for piece in pieces:
            if isinstance(piece, int):
                self._malformed(f"a line of {piece} bytes")
                continue
            for line in piece.splitlines():
                if not line.strip().startswith(b"{"):
                    continue  # a library printing on stdout; the command's own lines are JSON objects
                try:
                    message = protocol.parse(line)
                except UnknownMessage:
                    continue  # a newer program's message: nothing here knows it
                except ValueError as exc:
                    self._malformed(str(exc))
                    continue
                self.sig_message.emit(message)

    def _malformed(self, why: str) -> None:
        self.malformed_lines += 1
        if self.malformed_lines <= 3:
            log.warning("%s: a line of its output is not a %s; skipped (%s)",
                        self.command[0] if self.command else "?", self._protocol.name if self._protocol else "message",
                        why)

    # ------------------------------------------------------------ stop and kill
    def terminate(self, grace_ms: int) -> None:
        """Ask the command to end (SIGTERM: it may finish what it is doing); killed after `grace_ms`."""
        if self._process is None:
            return
        self._process.terminate()
        self._kill_timer.start(grace_ms)

    def _kill_after_grace(self) -> None:
        if self._process is not None:
            self._process.kill()

    def _root(self) -> psutil.Process | None:
        try:
            return psutil.Process(self.pid()) if self.pid() > 0 else None
        except psutil.Error:
            return None

    def _remember_tree(self) -> None:
        """The process's descendants: once it is gone they cannot be found from its pid."""
        self._tree = find_tree(self._root(), self._tree).procs

    def kill(self, grace_ms: int = 2000) -> None:
        """End the whole process tree: terminate now, kill what is left after `grace_ms` (what it
        started meanwhile too: `studio.core.runs.ending`)."""
        if self._process is None:
            return
        self.killed = True
        tree = end_tree(self._root(), self._tree)
        self._tree = tree.procs
        self._append_console("[studio] the process tree was ended on request (Kill)\n")
        QTimer.singleShot(grace_ms, tree.kill)

    def kill_now(self, timeout_s: float = 5.0) -> None:
        """Blocking kill for shutdown: nothing of the command is left behind."""
        if self._process is None:
            return
        self.killed = True
        tree = end_tree(self._root(), self._tree, kill=True)
        self._tree = tree.procs
        tree.wait(timeout_s)
        if self._process is not None:
            self._process.waitForFinished(int(timeout_s * 1000))
