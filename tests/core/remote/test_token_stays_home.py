"""The hub token, stored in the keyring and set as HF_TOKEN, appears in nothing a bundle, a remote session
(send, record, the files there) or a run writes, nor in what they print."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import pytest
from fixtures.sshd import SshServer

from studio.core.export.bundle import export_bundle
from studio.core.models.hub_token import read_token, store_token
from studio.core.project.folder import Project
from studio.core.remote.control import write_record
from studio.core.remote.machines import RemoteMachine
from studio.core.remote.probe import probe_machine
from studio.core.remote.ssh import SshClient
from studio.core.remote.start import project_folder_name, send_bundle

SECRET = "hf_StaysHome0123456789abcdef"


@pytest.fixture
def token_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("keyrings.alt", reason="the test keyring is keyrings.alt's file backend")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    monkeypatch.setenv("STUDIO_ALLOW_FILE_KEYRING", "1")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "keyring-home"))
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", SECRET)
    import keyring
    import keyring.core

    monkeypatch.setattr(keyring.core, "_keyring_backend", None)  # chosen again from the environment above
    store_token(SECRET)
    assert read_token() == SECRET
    yield
    keyring.core._keyring_backend = None


def _holding_secret(*folders: Path) -> list[Path]:
    found = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink() and "keyring-home" not in path.parts:
                data = path.read_bytes()
                if SECRET.encode() in data:
                    found.append(path)
                if path.suffix == ".zip":
                    with zipfile.ZipFile(path) as archive:
                        found += [path / n for n in archive.namelist() if SECRET.encode() in archive.read(n)]
    return found


def test_a_bundle_and_a_remote_session_carry_no_token(token_everywhere: None, demo: Project, tmp_path: Path,
                                                      remote_machine: RemoteMachine, sshd: SshServer,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    export_bundle(demo.config_path, tmp_path / "bundle", zip=True, include_model=True)
    client = SshClient(remote_machine)
    report = dataclasses.replace(probe_machine(client), rsync=False)
    project = f"{project_folder_name(demo.config_path)}-token"
    sent = send_bundle(client, report, demo.config_path, project, 1, None)
    local = demo.root / "runs" / "remote-run"
    local.mkdir(parents=True)
    from studio.core.remote.control import RemoteRunRecord

    write_record(local, RemoteRunRecord("box", remote_machine.target, sent.bundle_dir, f"{sent.bundle_dir}/runs/x",
                                        "pid", "status", "log", "nohup", "sftp", 1, 0.0))
    assert json.loads((local / "remote.json").read_text())["machine"] == "box"
    printed = capfd.readouterr()
    assert SECRET not in printed.out + printed.err
    assert _holding_secret(tmp_path, Path(sent.bundle_dir)) == []
