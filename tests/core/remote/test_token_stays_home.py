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


# launch.sh of a stand-in bundle: it says whether the token arrived (its digest, never the token) and how many
# processes there hold it on their command line (what `ps` shows to every account); HOLD keeps it going.
_TOKEN_LAUNCH = r"""#!/bin/sh
RUN="$PWD/runs/$(date +%Y%m%d-%H%M%S)-$$"
mkdir -p "$RUN"
printf %s "${HF_TOKEN:-}" | sha256sum | cut -c1-64 > "$RUN/token.sha256"
"$PYTHON" - > "$RUN/command-lines" <<'PY'
import glob, os
token = os.environ.get("HF_TOKEN", "").encode() or b"\0no token\0"
held = 0
for path in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        held += token in open(path, "rb").read()
    except OSError:
        pass
print(held)
PY
echo "launch.sh: run folder $RUN"
i=0
while [ -n "${HOLD:-}" ] && [ ! -e "$PWD/release" ] && [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
"""


def _token_bundle(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "launch.sh").write_text(_TOKEN_LAUNCH, encoding="utf-8")
    (folder / "launch.sh").chmod(0o755)
    return folder


@pytest.mark.parametrize("mode", ["tmux", "nohup"])
def test_a_remote_run_gets_the_token_in_its_environment_only(mode: str, remote_machine: RemoteMachine,
                                                             sshd: SshServer, tmp_path: Path) -> None:
    """A gated base downloads on the machine: the run there had no token (HF_TOKEN in its ~/.bashrc is not read by
    the non-interactive shell that starts it). Under tmux a second run joined the server of a run already going,
    whose environment is that run's."""
    import hashlib
    import shutil

    from studio.core.remote.start import launch_detached

    if mode == "tmux" and shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    client = SshClient(dataclasses.replace(remote_machine, detach=mode))
    report = probe_machine(client)
    first = _token_bundle(sshd.workspace / f"first-{mode}")
    client_holding = SshClient(dataclasses.replace(remote_machine, detach=mode,
                                                   env={**remote_machine.env, "HOLD": "1"}))
    going, _ = launch_detached(client_holding, report, str(first), gpus=1, cpu=True)  # another run, no token
    try:
        bundle = _token_bundle(sshd.workspace / f"second-{mode}")
        record, _ = launch_detached(client, report, str(bundle), gpus=1, cpu=True, hidden_env={"HF_TOKEN": SECRET})
    finally:
        (first / "release").touch()
    run = Path(record.remote_run_dir)
    assert (run / "token.sha256").read_text().strip() == hashlib.sha256(SECRET.encode()).hexdigest()
    assert (run / "command-lines").read_text().strip() == "0"
    assert _holding_secret(sshd.workspace) == []
    assert (Path(going.remote_run_dir) / "token.sha256").read_text().strip() == hashlib.sha256(b"").hexdigest()


def test_check_sh_there_sees_the_machines_environment_as_launch_sh_does(remote_machine: RemoteMachine,
                                                                        sshd: SshServer, tmp_path: Path) -> None:
    # The machine's HF_HOME (where `hf auth login` put its token there) reached launch.sh but not check.sh, whose
    # look for a token for a gated base then failed a run that would have downloaded it.
    from studio.core.remote.start import launch_detached

    machine = dataclasses.replace(remote_machine, detach="nohup",
                                  env={**remote_machine.env, "HF_HOME": "/workspace/hf"})
    client = SshClient(machine)
    bundle = _token_bundle(sshd.workspace / "checked")
    (bundle / "check.sh").write_text('#!/bin/sh\nprintf %s "${HF_HOME:-}" > "$PWD/check-saw"\necho "PASS all"\n')
    (bundle / "check.sh").chmod(0o755)
    launch_detached(client, probe_machine(client), str(bundle), gpus=1, cpu=True, check=True)
    assert (bundle / "check-saw").read_text() == "/workspace/hf"
