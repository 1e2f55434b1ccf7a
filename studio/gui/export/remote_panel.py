"""The Export page's remote machines: add one, check it, send this project's run there and start it.

Everything that talks to a machine runs on the panel's Worker; a started run is handed to the
RunController, so the Train page follows it as it follows a local one.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from studio.core.config.errors import ConfigError
from studio.core.export.bundle import ExportError
from studio.core.remote.machines import (
    DEFAULT_WORKSPACE,
    MachineError,
    RemoteMachine,
    load_machines,
    remove_machine,
    save_machine,
)
from studio.core.remote.passphrases import PassphraseError, store_passphrase
from studio.core.remote.probe import MachineReport, probe_machine
from studio.core.remote.ssh import RemoteError, SshClient
from studio.core.remote.start import RemoteStart, StartUncertain, start_remote_run
from studio.gui.base.names import named
from studio.gui.context import StudioContext
from studio.gui.runner.remote_run import RemoteRun
from studio.gui.runner.worker import Worker

EXPECTED = (RemoteError, MachineError, ExportError, ConfigError, PassphraseError, OSError)


def _check(machine: RemoteMachine) -> MachineReport:
    client = SshClient(machine)
    try:
        return probe_machine(client)
    finally:
        client.close()


class MachineDialog(QDialog):
    """Host, user, port, key file, workspace, Python; a passphrase only when the person wants it kept."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add a remote machine")
        self.fields = {name: named(QLineEdit(), f"machine_{name}") for name in
                       ("name", "host", "user", "key_file", "workspace", "python", "passphrase")}
        self.fields["workspace"].setText(DEFAULT_WORKSPACE)
        self.fields["python"].setText("python3")
        self.fields["host"].setPlaceholderText("address, host name or ~/.ssh/config alias")
        self.fields["key_file"].setPlaceholderText("empty: ~/.ssh/config and your ssh-agent")
        self.fields["passphrase"].setEchoMode(QLineEdit.EchoMode.Password)
        self.fields["passphrase"].setPlaceholderText("only to keep it in the system keyring")
        self.port = named(QSpinBox(), "machine_port")
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText("from ~/.ssh/config (22)")
        form = QFormLayout(self)
        for label, key in (("Name", "name"), ("Host", "host"), ("User", "user")):
            form.addRow(label, self.fields[key])
        form.addRow("Port", self.port)
        for label, key in (("Key file", "key_file"), ("Key passphrase", "passphrase"), ("Workspace there", "workspace"),
                           ("Python there", "python")):
            form.addRow(label, self.fields[key])
        self.problem = named(QLabel(), "machine_problem")  # why the machine typed was refused, to correct it here
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #c62828;")
        form.addRow(self.problem)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def machine(self) -> RemoteMachine:
        text = {key: field.text().strip() for key, field in self.fields.items()}
        return RemoteMachine(text["name"], text["host"], text["user"] or None, self.port.value() or None,
                             text["key_file"] or None, text["workspace"] or DEFAULT_WORKSPACE, text["python"] or "python3")

    def passphrase(self) -> str:
        return self.fields["passphrase"].text()


class RemotePanel(QGroupBox):
    sig_started = Signal(object)  # the RemoteRun the controller follows

    def __init__(self, context: StudioContext, gpus: Callable[[], int], gpu_type: Callable[[], str | None],
                 parent: QWidget | None = None) -> None:
        super().__init__("Run it on a remote machine (over SSH)", parent)
        self.context = context
        self._gpus, self._gpu_type = gpus, gpu_type
        self.worker = Worker(self)
        self.started: RemoteStart | None = None
        self._failure_prefix = ""
        self.machines = named(QComboBox(), "export_remote_machine")
        self.add_button = named(QPushButton("Add…"), "export_remote_add")
        self.check_button = named(QPushButton("Check"), "export_remote_check")
        self.remove_button = named(QPushButton("Remove"), "export_remote_remove")
        self.cpu = named(QCheckBox("Train on its CPU (tests the set-up, no GPU needed)"), "export_remote_cpu")
        self.run_check = named(QCheckBox("Run check.sh there first"), "export_remote_run_check")
        self.run_check.setChecked(True)
        self.start_button = named(QPushButton("Send and start"), "export_remote_start")
        self.progress = named(QProgressBar(), "export_remote_progress")
        self.progress.setVisible(False)
        self.status = named(QLabel("Machines are kept in your user settings; keys and passwords never are."),
                            "export_remote_status")
        self.status.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.machines, 1)
        for button in (self.add_button, self.check_button, self.remove_button):
            row.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.cpu)
        layout.addWidget(self.run_check)
        layout.addWidget(self.start_button)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        self.add_button.clicked.connect(self._add_dialog)
        self.check_button.clicked.connect(self.check_machine)
        self.remove_button.clicked.connect(self._remove)
        self.start_button.clicked.connect(self.send_and_start)
        self.refresh_machines()

    # ------------------------------------------------------------ machines
    def refresh_machines(self) -> None:
        current = self.machines.currentText()
        self.machines.clear()
        try:
            names = sorted(load_machines())
        except MachineError as exc:
            names = []
            self.say(str(exc))
        self.machines.addItems(names)
        if current in names:
            self.machines.setCurrentText(current)
        self.update_enabled()

    def update_enabled(self) -> None:
        idle = not self.worker.busy
        chosen = bool(self.machines.currentText())
        self.check_button.setEnabled(idle and chosen)
        self.remove_button.setEnabled(idle and chosen)
        self.start_button.setEnabled(idle and chosen and self.context.config is not None
                                     and self.context.project is not None)

    def add_machine(self, machine: RemoteMachine, passphrase: str = "") -> bool:
        try:
            if passphrase and not machine.key_file:  # before the machine is saved: "not added" is then so
                raise MachineError("a passphrase belongs to a key file: name the key file too")
            save_machine(machine)
            if passphrase and machine.key_file:
                store_passphrase(machine.key_file, passphrase)
        except (MachineError, PassphraseError) as exc:
            self.say(f"The machine was not added: {exc}")
            return False
        self.refresh_machines()
        self.machines.setCurrentText(machine.name)
        self.say(f"{machine.name} ({machine.describe()}) added; Check connects to it.")
        return True

    def _add_dialog(self) -> None:
        dialog = MachineDialog(self)
        # A machine refused (a name with a space, a key file mistyped) or named as another already kept: the dialog
        # again, as typed, with the reason, until it is added or cancelled.
        while dialog.exec() == QDialog.DialogCode.Accepted:
            machine = dialog.machine()
            kept = self.known_machines().get(machine.name)
            if kept is not None and QMessageBox.question(
                    self, "Add a remote machine", f"You have a machine named {machine.name} ({kept.describe()}).\n\n"
                    "Replace it with this one?") != QMessageBox.StandardButton.Yes:
                dialog.problem.setText(f"{machine.name} is the name of a machine you have: choose another name.")
                continue
            if self.add_machine(machine, dialog.passphrase()):
                return
            dialog.problem.setText(self.status.text())

    def known_machines(self) -> dict[str, RemoteMachine]:
        try:
            return load_machines()
        except MachineError:  # the list cannot be read: saving says so
            return {}

    def _remove(self) -> None:
        name = self.machines.currentText()
        if name and remove_machine(name):
            self.say(f"{name} removed (nothing on the machine was touched).")
        self.refresh_machines()

    def machine(self) -> RemoteMachine | None:
        try:
            return load_machines().get(self.machines.currentText())
        except MachineError as exc:
            self.say(str(exc))
            return None

    def say(self, text: str) -> None:
        self.status.setText(text)
        self.context.status(text.splitlines()[0] if text else "")

    # ------------------------------------------------------------ work on the machine
    def check_machine(self) -> None:
        machine = self.machine()
        if machine is None:
            return
        self._busy(f"Connecting to {machine.name} ({machine.describe()})…", "")
        self.worker.run(_check, machine, on_done=self._checked, on_failed=self._failed, expected=EXPECTED)

    def _checked(self, report: MachineReport) -> None:
        self._idle()
        self.say(report.summary())

    def send_and_start(self) -> None:
        machine, project = self.machine(), self.context.project
        if machine is None or project is None or self.context.config is None:
            return
        if self.context.run_controller.running:
            self.say(self.context.run_controller.busy_message())
            return
        self._busy(f"Sending {project.root.name} to {machine.name}…", "Nothing was started: ")
        self.worker.run(start_remote_run, project.config_path, machine, gpus=self._gpus(), cpu=self.cpu.isChecked(),
                        gpu_type=self._gpu_type(), run_check=self.run_check.isChecked(), on_done=self._started,
                        on_failed=self._failed, on_progress=self._on_progress, expected=EXPECTED)

    def _started(self, started: RemoteStart) -> None:
        self._idle()
        self.started = started
        self.say(started.summary())
        try:
            remote = RemoteRun(started.local_dir, started.record)
        except (RemoteError, MachineError) as exc:
            self.say(f"The run started on {started.record.machine} but cannot be followed: {exc}")
            return
        if self.context.run_controller.follow_remote(remote):
            self.sig_started.emit(remote)
            self.context.status(f"Training on {started.record.machine}: follow it on the Train page")

    def _on_progress(self, message: str, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress.setFormat(f"{message}  %v/%m")

    def _failed(self, error: BaseException) -> None:
        self._idle()
        text = error.describe() if isinstance(error, ConfigError) else str(error)
        # A start whose answer was lost may have started: no "Nothing was started" before it.
        self.say(text if isinstance(error, StartUncertain) else self._failure_prefix + text)

    def _busy(self, text: str, failure_prefix: str) -> None:
        self._failure_prefix = failure_prefix
        self.say(text)
        self.progress.setFormat("")
        self.progress.setRange(0, 0)
        self.progress.setVisible(True)
        for button in (self.check_button, self.remove_button, self.start_button, self.add_button):
            button.setEnabled(False)

    def _idle(self) -> None:
        self.progress.setVisible(False)
        self.add_button.setEnabled(True)
        self.update_enabled()

    def shutdown(self) -> None:
        self.worker.wait(60.0)
