"""Add a remote machine: what was typed is never lost to a mistake the person can correct, a machine refused is
not kept, and another machine of the same name is replaced only once the person says so."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtWidgets import QDialog, QMessageBox

from studio.core.remote.machines import RemoteMachine, load_machines, save_machine
from studio.gui.context import StudioContext
from studio.gui.export.remote_panel import MachineDialog, RemotePanel
from studio.gui.shell.application import make_settings


@pytest.fixture
def panel(qtbot, tmp_path: Path) -> RemotePanel:
    widget = RemotePanel(StudioContext(make_settings(tmp_path / "settings.ini")), lambda: 1, lambda: None)
    qtbot.addWidget(widget)
    return widget


def drive(monkeypatch: pytest.MonkeyPatch, *turns: Callable[[MachineDialog], bool]) -> list[str]:
    """Each showing of the dialog is one turn (it fills fields and returns OK or Cancel); the reasons shown
    in it before each turn are returned."""
    shown: list[str] = []
    left = list(turns)

    def exec_(dialog: MachineDialog) -> int:
        shown.append(dialog.problem.text())
        ok = left.pop(0)(dialog) if left else False
        return QDialog.DialogCode.Accepted if ok else QDialog.DialogCode.Rejected

    monkeypatch.setattr(MachineDialog, "exec", exec_)
    return shown


def test_a_machine_refused_brings_the_dialog_back_as_typed(panel: RemotePanel, monkeypatch) -> None:
    def typed(dialog: MachineDialog) -> bool:
        for key, text in (("name", "my pod"), ("host", "203.0.113.7"), ("user", "root")):
            dialog.fields[key].setText(text)
        dialog.port.setValue(2222)
        return True

    def corrected(dialog: MachineDialog) -> bool:
        assert dialog.fields["host"].text() == "203.0.113.7" and dialog.port.value() == 2222
        dialog.fields["name"].setText("my-pod")
        return True

    shown = drive(monkeypatch, typed, corrected)
    panel._add_dialog()  # type: ignore[attr-defined]
    assert "my pod" in shown[1] and "letters, digits" in shown[1]
    kept = load_machines()["my-pod"]
    assert (kept.host, kept.user, kept.port) == ("203.0.113.7", "root", 2222)


def test_a_passphrase_without_its_key_file_keeps_no_machine(panel: RemotePanel) -> None:
    assert not panel.add_machine(RemoteMachine("pod", "203.0.113.7"), passphrase="secret")
    assert "was not added" in panel.status.text() and "key file" in panel.status.text()
    assert "pod" not in load_machines()


def test_a_name_taken_replaces_the_other_machine_only_once_asked(panel: RemotePanel, monkeypatch) -> None:
    save_machine(RemoteMachine("pod", "198.51.100.1", "ubuntu"))

    def same_name(dialog: MachineDialog) -> bool:
        dialog.fields["name"].setText("pod")
        dialog.fields["host"].setText("203.0.113.7")
        return True

    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda _parent, _title, text, *a: asked.append(text) or QMessageBox.StandardButton.No)
    shown = drive(monkeypatch, same_name)  # then Cancel
    panel._add_dialog()  # type: ignore[attr-defined]
    assert "You have a machine named pod (ubuntu@198.51.100.1" in asked[0]
    assert "choose another name" in shown[1]
    assert load_machines()["pod"].host == "198.51.100.1"
