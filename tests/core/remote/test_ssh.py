"""Reaching a machine through the system's ssh: a check of what it offers, and errors a person can act on.

The machine is a real sshd on 127.0.0.1 (tests/fixtures/sshd.py).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest
from fixtures.sshd import SshServer

from studio.core.remote.machines import RemoteMachine, save_machine
from studio.core.remote.passphrases import forget_passphrase, store_passphrase
from studio.core.remote.probe import probe_machine
from studio.core.remote.ssh import RemoteError, SshClient


def test_a_check_reports_python_tools_workspace_and_no_gpu(remote_machine: RemoteMachine, sshd: SshServer) -> None:
    client = SshClient(remote_machine)
    report = probe_machine(client)
    assert report.python == ".".join(map(str, sys.version_info[:3])) and report.python_ok
    assert report.workspace == str(sshd.workspace.resolve()) and report.writable
    assert report.free_gb is not None and report.free_gb > 0
    assert report.gpus == [] and report.gpu_text().startswith("no GPU on the remote")
    assert report.problems() == []
    assert "Connected to box (" in report.summary()
    # The same connection serves the next calls.
    assert client.run("echo $((6 * 7))\n", "arithmetic").stdout.strip() == "42"


def test_a_workspace_that_cannot_be_written_and_a_missing_python_are_problems(
    remote_machine: RemoteMachine, sshd: SshServer
) -> None:
    machine = dataclasses.replace(remote_machine, workspace="/proc/no-such-place", python="python2.7-nowhere")
    report = probe_machine(SshClient(machine))
    problems = " ".join(report.problems())
    assert "the workspace /proc/no-such-place cannot be written" in problems
    assert "Python 3.11+ is needed there" in problems


def test_a_port_with_nothing_listening_says_so(remote_machine: RemoteMachine) -> None:
    from fixtures.sshd import _free_port

    machine = dataclasses.replace(remote_machine, port=_free_port())
    with pytest.raises(RemoteError, match=r"cannot reach box .*connection refused\): check the port"):
        probe_machine(SshClient(machine))


def test_a_key_the_machine_does_not_know_is_refused_with_what_to_do(remote_machine: RemoteMachine,
                                                                     tmp_path: Path) -> None:
    import subprocess

    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    machine = dataclasses.replace(remote_machine, key_file=str(stranger))
    with pytest.raises(RemoteError, match=rf"refused {stranger}: put the public key in the machine's "
                                          r"~/.ssh/authorized_keys"):
        probe_machine(SshClient(machine))


def test_a_changed_host_key_is_explained(remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "known_hosts"
    other.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 "
                     "AAAAC3NzaC1lZDI1NTE5AAAAIHh5fC6Wq4c2bJ0m0F0X0c7ZB5nm1t5Q6Nn5m6S3a2tT\n")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  UserKnownHostsFile {other}\n  GlobalKnownHostsFile /dev/null\n")
    monkeypatch.setenv("STUDIO_SSH_CONFIG", str(config))
    with pytest.raises(RemoteError, match=r"host key of box .* is not the one seen before: .*ssh-keygen -R") as caught:
        probe_machine(SshClient(remote_machine))
    # The machine's port is not 22: its known_hosts line is [host]:port, and only that command forgets it.
    assert f"`ssh-keygen -R '[127.0.0.1]:{sshd.port}'`" in str(caught.value)
    assert "ssh-keygen -R 127.0.0.1" not in str(caught.value)


def test_a_key_with_a_passphrase_works_from_the_keyring_only_when_asked(
    remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("keyrings.alt", reason="the tests keep passphrases with keyrings.alt's file backend")
    # keyrings.alt's file backend stands in for the system keyring, in this test's folder.
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    monkeypatch.setenv("STUDIO_ALLOW_FILE_KEYRING", "1")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    locked = dataclasses.replace(remote_machine, key_file=str(sshd.locked_key))
    save_machine(locked)
    with pytest.raises(RemoteError, match=rf"needs the passphrase of {sshd.locked_key}: add the key to your "
                                          r"ssh-agent .*--save-passphrase"):
        probe_machine(SshClient(locked))
    store_passphrase(sshd.locked_key, sshd.LOCKED_PASSPHRASE)
    try:
        client = SshClient(locked)
        assert probe_machine(client).python_ok
        client.close()
    finally:
        assert forget_passphrase(sshd.locked_key)
    # Nothing the studio wrote holds the passphrase (the keyring's stand-in keeps it, encoded).
    keyring_folder = tmp_path / "data" / "python_keyring"
    written = [p for root in (os.environ["STUDIO_CONFIG_DIR"], os.environ["STUDIO_CACHE_DIR"], sshd.workspace)
               for p in Path(root).rglob("*") if p.is_file()]
    written += [p for p in tmp_path.rglob("*") if p.is_file() and keyring_folder not in p.parents]
    assert written
    assert not [p for p in written if sshd.LOCKED_PASSPHRASE.encode() in p.read_bytes()]


def test_a_python_under_the_remote_home_written_with_a_tilde_is_found(remote_machine: RemoteMachine,
                                                                     sshd: SshServer, tmp_path: Path) -> None:
    """`~/venv/bin/python` is how people name the interpreter in their home there: the check, the studio's
    own calls and the run all find it, as the workspace's `~` is."""
    import secrets
    import subprocess
    import time

    from fixtures.sshd import fake_bundle

    from studio.core.remote.control import kill_remote_run, remote_state
    from studio.core.remote.start import launch_detached

    folder = Path.home() / f".studio-test-{secrets.token_hex(4)}"  # the machine's home is this computer's
    try:
        (folder / "bin").mkdir(parents=True)
        (folder / "bin" / "python").write_text(f'#!/bin/sh\nexec {subprocess.list2cmdline([sys.executable])} "$@"\n')
        (folder / "bin" / "python").chmod(0o755)
        machine = dataclasses.replace(remote_machine, python=f"~/{folder.name}/bin/python", detach="nohup")
        client = SshClient(machine)
        report = probe_machine(client)
        assert report.python_ok, report.python
        assert client.python("print(6 * 7)\n", "arithmetic").stdout.strip() == "42"
        record, _check = launch_detached(client, report, str(fake_bundle(sshd.workspace / f"tilde-{tmp_path.name}")),
                                         gpus=1, cpu=True)
        events = Path(record.remote_run_dir) / "events.jsonl"  # the trainer, started with "$PYTHON", writes it
        deadline = time.monotonic() + 60
        while not events.is_file() and remote_state(client, record)[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert events.is_file(), (Path(record.remote_run_dir) / "console.log").read_text()
        kill_remote_run(client, record, grace_s=5)
        client.close()
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def test_too_many_keys_offered_says_to_name_the_key(remote_machine: RemoteMachine, sshd: SshServer,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A person with many keys (in the ssh-agent or ~/.ssh) and no key named for the machine: the server
    hangs up after six wrong ones, before the right one is offered. The studio says to name the key."""
    import subprocess

    identities = ""
    for number in range(7):
        key = tmp_path / f"other-{number}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        identities += f"  IdentityFile {key}\n"
    config = tmp_path / "ssh_config"
    config.write_text(sshd.ssh_config.read_text() + identities + f"  IdentityFile {sshd.key}\n  IdentityAgent none\n")
    monkeypatch.setenv("STUDIO_SSH_CONFIG", str(config))
    machine = dataclasses.replace(remote_machine, key_file=None)
    with pytest.raises(RemoteError) as caught:
        probe_machine(SshClient(machine))
    assert "box (root@127.0.0.1:" in str(caught.value)
    assert "hung up after too many keys were offered" in str(caught.value)
    assert "name the machine's key file, so that only it is offered" in str(caught.value)


@pytest.mark.skipif(os.name == "nt", reason="no shared connection (ControlMaster) on Windows")
def test_the_shared_connection_never_uses_a_socket_folder_another_account_could_write(
    remote_machine: RemoteMachine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/tmp is everyone's: a folder of the studio's name made first by someone else (or open to all, or a
    link) would let them answer in place of the machine and read every file sent; the studio uses its own."""
    import shutil
    import tempfile

    from studio.core.remote import ssh

    short = Path(tempfile.mkdtemp())  # a socket's path must stay short (about 100 characters)
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    monkeypatch.setattr(ssh, "_OWN_SOCKETS", [], raising=False)
    shared = short / f"studio-ssh-{os.getuid()}"
    elsewhere = short / "theirs"
    elsewhere.mkdir()
    client = None
    try:
        for planted in ("open to all", "a link"):
            if planted == "open to all":
                shared.mkdir()
                shared.chmod(0o777)
            else:
                shared.rmdir()
                shared.symlink_to(elsewhere)
            client = SshClient(remote_machine)
            folder = client.control_path().parent
            assert folder.resolve() not in (shared.resolve(), elsewhere), planted
            assert folder.stat().st_uid == os.getuid() and folder.stat().st_mode & 0o077 == 0, planted
        assert client.run("echo $((6 * 7))\n", "arithmetic").stdout.strip() == "42"
        assert list(elsewhere.iterdir()) == [] and any(folder.iterdir())  # its master's socket is in its own
    finally:
        if client is not None:
            client.close()
        shutil.rmtree(short, ignore_errors=True)
