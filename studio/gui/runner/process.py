"""Commands the studio runs: one QProcess wrapper, its console output, stop and kill.

A command's stdout and stderr go straight into a console file (not a pipe), so nothing it
prints is lost if the studio goes away, and its lines are read back from that file. The
trainer writes `RUN_DIR/console.log` and runs under a tiny launcher that starts it in its
own session: closing the studio with "keep running" ends only the launcher and the training
goes on. Shorter commands (building the demo's tiny model) use the same wrapper and end
with the window.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
from pathlib import Path

import psutil
from PySide6.QtCore import QIODevice, QObject, QProcess, QProcessEnvironment, QTimer, Signal

from studio.core.runs.folders import CONSOLE_FILE, request_stop
from studio.core.runs.launch import format_command
from studio.core.runs.lock import write_process_file

log = logging.getLogger(__name__)

# Runs the real command in a new session / process group and passes its exit code on.
_LAUNCHER = """\
import os, subprocess, sys
kw = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt" else {"start_new_session": True}
child = subprocess.Popen(sys.argv[1:], **kw)
while True:
    try:
        code = child.wait()
        break
    except KeyboardInterrupt:
        pass
sys.exit(128 - code if code < 0 else code)
"""


def console_text(raw: str) -> tuple[list[str], str]:
    """Split console output into finished lines and the unfinished rest.

    A progress bar rewrites its line with '\\r'; only the text after the last '\\r' of
    each line is kept, so the pane shows "50/50" and not fifty copies of the bar.
    """
    parts = raw.split("\n")
    rest = parts.pop()
    lines = [part.rstrip("\r").rsplit("\r", 1)[-1] for part in parts]
    return lines, rest


class CommandProcess(QObject):
    """Runs one command at a time and reports what it does (qutebrowser's GUIProcess style)."""

    sig_started = Signal()
    sig_finished = Signal(int, str)  # exit code, "normal" | "crashed" | "failed to start" | "detached"
    sig_error = Signal(str)
    sig_output = Signal(str)  # finished console lines
    sig_progress = Signal(str)  # the line a progress bar is redrawing

    def __init__(self, parent: QObject | None = None, poll_ms: int = 200) -> None:
        super().__init__(parent)
        self.command: list[str] = []
        self.console_path: Path | None = None
        self.killed = False
        self._process: QProcess | None = None
        self._console_offset = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._rest = ""
        self._tree: list[psutil.Process] = []
        self._poll = QTimer(self)
        self._poll.setInterval(poll_ms)
        self._poll.timeout.connect(self._read_console)

    # ------------------------------------------------------------ state
    def is_running(self) -> bool:
        return self._process is not None

    def pid(self) -> int:
        return int(self._process.processId()) if self._process is not None else 0

    # ------------------------------------------------------------ start
    def start(self, command: list[str], console: Path, cwd: Path | None = None,
              env: dict[str, str] | None = None) -> bool:
        """Start `command` with its output appended to `console`; refused (False, sig_error) while one runs."""
        refusal = self.refusal(command)
        if refusal:
            self.sig_error.emit(refusal)
            return False
        self.command = list(command)
        self.console_path = console
        self.killed = False
        self._console_offset, self._rest = 0, ""
        self._decoder.reset()
        self._tree = []
        with open(console, "a", encoding="utf-8") as handle:
            handle.write(f"$ {format_command(self.command)}\n")
        self._console_offset = console.stat().st_size

        proc = QProcess(self)
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        proc.setStandardOutputFile(str(console), QIODevice.OpenModeFlag.Append)
        if cwd is not None:
            proc.setWorkingDirectory(str(cwd))
        if env:
            qenv = QProcessEnvironment.systemEnvironment()
            for key, value in env.items():
                qenv.insert(key, value)
            proc.setProcessEnvironment(qenv)
        program, args = self.program_and_arguments(self.command)
        proc.setProgram(program)
        proc.setArguments(args)
        proc.started.connect(self._on_started)
        proc.finished.connect(self._on_finished)
        proc.errorOccurred.connect(self._on_error)
        self._process = proc
        proc.start()
        return True

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
        self.sig_finished.emit(-1, "failed to start")

    def _on_finished(self, exit_code: int, status: QProcess.ExitStatus) -> None:
        if self._process is None:
            return
        self._read_console()
        if self._rest:
            self.sig_output.emit(self._rest.rsplit("\r", 1)[-1])
            self._rest = ""
        crashed = status == QProcess.ExitStatus.CrashExit
        self._cleanup()
        self.sig_finished.emit(int(exit_code), "crashed" if crashed else "normal")

    def _cleanup(self) -> None:
        self._poll.stop()
        proc, self._process = self._process, None
        if proc is not None:
            proc.deleteLater()

    # ------------------------------------------------------------ console
    def _append_console(self, text: str) -> None:
        if self.console_path is not None:
            try:
                with open(self.console_path, "a", encoding="utf-8") as handle:
                    handle.write(text)
            except OSError:
                pass

    def _read_console(self) -> None:
        path = self.console_path
        if path is None:
            return
        try:
            with open(path, "rb") as handle:
                handle.seek(self._console_offset)
                data = handle.read(1 << 20)  # one poll reads at most 1 MB: the GUI stays fluid
        except OSError:
            return
        if not data:
            return
        self._console_offset += len(data)
        lines, self._rest = console_text(self._rest + self._decoder.decode(data))
        if lines:
            self.sig_output.emit("\n".join(lines))
        if self._rest:
            self.sig_progress.emit(self._rest.rsplit("\r", 1)[-1])

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

    # ------------------------------------------------------------ kill
    def _remember_tree(self) -> None:
        """The process's descendants: once it is gone they cannot be found from its pid."""
        try:
            root = psutil.Process(self.pid())
            known = {p.pid for p in self._tree}
            self._tree += [p for p in [root, *root.children(recursive=True)] if p.pid not in known]
        except (psutil.Error, ValueError):
            pass

    def kill(self, grace_ms: int = 2000) -> None:
        """End the whole process tree: terminate now, kill what is left after `grace_ms`."""
        if self._process is None:
            return
        self.killed = True
        self._remember_tree()
        procs = list(self._tree)
        # Children first: with their parent gone they would be harder to find.
        for proc in reversed(procs):
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        self._append_console("[studio] the process tree was ended on request (Kill)\n")

        def finish() -> None:
            for proc in procs:
                try:
                    if proc.is_running():
                        proc.kill()
                except psutil.Error:
                    pass

        QTimer.singleShot(grace_ms, finish)

    def kill_now(self, timeout_s: float = 5.0) -> None:
        """Blocking kill for shutdown: nothing of the command is left behind."""
        if self._process is None:
            return
        self.killed = True
        self._remember_tree()
        for proc in self._tree:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(self._tree, timeout=timeout_s)
        if self._process is not None:
            self._process.waitForFinished(int(timeout_s * 1000))


class TrainerProcess(CommandProcess):
    """The trainer of one run folder: its process file, the STOP request and "keep running"."""

    def __init__(self, parent: QObject | None = None, poll_ms: int = 200, use_launcher: bool = True) -> None:
        super().__init__(parent, poll_ms)
        self.run_dir: Path | None = None
        self.stop_requested = False
        self._use_launcher = use_launcher

    def start_run(self, command: list[str], run_dir: str | Path, env: dict[str, str] | None = None) -> bool:
        """Start `command` for `run_dir`; refused (False, sig_error) while another run is going."""
        refusal = self.refusal(command)
        if refusal:  # said before anything of the new run is touched
            self.sig_error.emit(refusal)
            return False
        self.run_dir = Path(run_dir)
        self.stop_requested = False
        return self.start(command, self.run_dir / CONSOLE_FILE, cwd=self.run_dir, env=env)

    def program_and_arguments(self, command: list[str]) -> tuple[str, list[str]]:
        if self._use_launcher:
            return command[0], ["-c", _LAUNCHER, *command]
        return command[0], command[1:]

    def busy_message(self) -> str:
        return (f"A training is already running ({self.run_dir.name if self.run_dir else '?'}). "
                "Stop it first, or add this config to the queue.")

    def start_failure_message(self, reason: str) -> str:
        return (f"Could not start the trainer '{self.command[0]}': {reason}. "
                "Check launch.python in the config (the training environment's Python).")

    def _on_started(self) -> None:
        if self.run_dir is not None and self._process is not None:
            try:
                write_process_file(self.run_dir, int(self._process.processId()))
            except OSError as exc:
                log.warning("cannot write the process file of %s: %s", self.run_dir, exc)
        super()._on_started()

    def stop(self) -> bool:
        """Ask the trainer to stop at its next step (it saves a checkpoint and says run_finished)."""
        if self._process is None or self.run_dir is None:
            return False
        request_stop(self.run_dir)
        self.stop_requested = True
        self._remember_tree()
        return True

    def _hand_over_process_file(self) -> None:
        """Point the run's process file at the trainer itself: the launcher is about to go, and
        the Runs page decides from that file whether the run is still going."""
        if self.run_dir is None:
            return
        try:
            trainer = psutil.Process(self.pid()).children()[0]
            write_process_file(self.run_dir, trainer.pid)
        except (psutil.Error, IndexError, ValueError, OSError) as exc:
            log.warning("cannot record the trainer of %s for after the studio closes: %s", self.run_dir, exc)

    def detach(self) -> None:
        """Let the training go on without the studio: end only the launcher, keep the trainer."""
        proc = self._process
        if proc is None:
            return
        if self._use_launcher:
            self._hand_over_process_file()
            proc.finished.disconnect(self._on_finished)
            proc.errorOccurred.disconnect(self._on_error)
            proc.kill()  # the launcher only; the trainer lives in its own session
            proc.waitForFinished(3000)
        self._append_console("[studio] the studio closed; the training goes on without it\n")
        self._cleanup()
        self.sig_finished.emit(0, "detached")
