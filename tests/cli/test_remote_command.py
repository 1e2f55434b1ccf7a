"""`studio-train remote`: add a machine, check it, send a run there, end it, watch it end, bring it back.

The machine is a real sshd on 127.0.0.1 (tests/fixtures/sshd.py); the project is the demo's with a
stand-in model folder, so the run there fails at loading (here it is ended first): this is about
the commands, the copies and what they print. The end-to-end training is tests/e2e/test_remote_run.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
from fixtures.sshd import SshServer

from studio.cli import main as cli
from studio.core.project.folder import Project
from studio.core.remote.machines import SSH_CONFIG_ENV

FAKE_TOKEN = "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42"


def _out(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_remote_commands_from_add_to_pull(demo: Project, sshd: SshServer, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SSH_CONFIG_ENV, str(sshd.ssh_config))
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)  # a person's token in the environment goes nowhere
    add = ["remote", "add", "box", "127.0.0.1", "--user", sshd.user, "--port", str(sshd.port), "--key", str(sshd.key),
           "--workspace", str(sshd.workspace / "cli"), "--python", sys.executable, "--env", "OMP_NUM_THREADS=1"]
    assert cli(add) == 0
    assert "box: " in _out(capsys)
    assert cli(["remote", "add", "bad", "127.0.0.1", "--env", f"HF_TOKEN={FAKE_TOKEN}"]) == 2
    assert "env.HF_TOKEN look like a password or token" in _out(capsys)
    assert cli(["remote", "list"]) == 0
    assert re.search(rf"^box +{sshd.user}@127.0.0.1:{sshd.port} ", _out(capsys), re.M)
    assert cli(["remote", "check", "box"]) == 0
    assert "GPUs: no GPU on the remote (nvidia-smi is not installed there)" in _out(capsys)

    config = str(demo.config_path)
    assert cli(["remote", "run", config, "--on", "box"]) == 1
    out = _out(capsys)
    assert "error: box: no GPU on the remote" in out and "(--cpu)" in out
    assert cli(["remote", "run", config, "--on", "box", "--nodes", "2"]) == 2
    assert "studio-train export --nodes N" in _out(capsys)

    assert cli(["remote", "run", config, "--on", "box", "--cpu", "--no-check"]) == 0
    out = _out(capsys)
    local = Path(re.search(r"^  here: (.+) \(events arrive", out, re.M).group(1))  # type: ignore[union-attr]
    there = re.search(r"^  run folder there: (.+)$", out, re.M).group(1)  # type: ignore[union-attr]
    images = re.search(r"(\d+) of (\d+) dataset file\(s\) copied", out)
    assert images and images.group(1) == images.group(2) != "0"
    pasted = shlex.quote(str(local))  # "demo project": quoted, so the line pastes into a shell as it reads
    assert f"studio-train remote watch {pasted}" in out and f"studio-train remote stop {pasted}" in out
    assert local.parent == demo.root / "runs" and (local / "remote.json").is_file()
    assert Path(there).is_dir() and Path(there).name == local.name

    assert cli(["remote", "run", config, "--on", "box", "--cpu", "--no-check"]) == 1  # one run per project there
    assert "a run of this project is still going on box" in _out(capsys)
    assert cli(["remote", "stop", str(local), "--kill"]) == 0
    assert re.search(r"ended \d+ process\(es\)|was not running", _out(capsys))
    assert cli(["remote", "watch", str(local)]) == 1  # ended without an exit status of its own
    assert (local / "config.toml").is_file() and (local / "command.txt").is_file()  # brought back
    assert cli(["remote", "pull", str(local)]) == 0
    assert re.search(r"^0 file\(s\) brought back .*, \d+ already here", _out(capsys), re.M)

    # A second send of the unchanged dataset copies no image.
    assert cli(["remote", "run", config, "--on", "box", "--cpu", "--no-check"]) == 0
    out = _out(capsys)
    assert re.search(r" 0 of [1-9]\d* dataset file\(s\) copied", out), out
    second = Path(re.search(r"^  here: (.+) \(events arrive", out, re.M).group(1))  # type: ignore[union-attr]
    assert cli(["remote", "stop", str(second), "--kill"]) == 0

    # No key, passphrase or token in any file written on either side.
    key_body = "".join(sshd.key.read_text().splitlines()[1:-1])
    secrets = [key_body[:40].encode(), key_body[-40:].encode(), FAKE_TOKEN.encode(), sshd.LOCKED_PASSPHRASE.encode()]
    written = [p for root in (demo.root, sshd.workspace / "cli", *(Path(os.environ[name]) for name in (
        "STUDIO_CONFIG_DIR", "STUDIO_CACHE_DIR", "STUDIO_DATA_DIR"))) for p in root.rglob("*") if p.is_file()]
    assert len(written) > 100
    assert [str(p) for p in written if any(s in p.read_bytes() for s in secrets)] == []


def test_a_pull_that_fails_on_this_computer_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """This computer's disk filled up while the run came back: one line saying so, not a traceback."""
    import errno

    from studio.core.remote import control
    from studio.core.remote.control import RemoteRunRecord, write_record

    run = tmp_path / "runs" / "20260101-000000-x"
    run.mkdir(parents=True)
    write_record(run, RemoteRunRecord("box", "root@pod:22", "/w/p", "/w/p/runs/x", "/w/p/a.pid", "/w/p/a.status",
                                      "/w/p/a.log", "nohup", "sftp", 123, 0.0))

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(run / "output"))

    monkeypatch.setattr(control, "pull_and_close", full)
    assert cli(["remote", "pull", str(run)]) == 1
    assert "error: [Errno 28] No space left on device" in _out(capsys)


def test_a_key_file_given_relative_to_here_is_found_from_any_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tmp_path / "work" / "keys"
    keys.mkdir(parents=True)
    (keys / "gpu.pem").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path / "work")
    assert cli(["remote", "add", "box", "10.0.0.9", "--key", "keys/gpu.pem"]) == 0
    monkeypatch.chdir(tmp_path)  # a later command (or the studio) runs from another folder
    capsys.readouterr()
    assert cli(["remote", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["box"]["key_file"] == str(keys / "gpu.pem")


def test_ctrl_c_while_watching_says_the_run_goes_on_and_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # It exited 0, so `remote watch RUN && remote pull RUN` went on as if the run had ended.
    import types

    from studio.core.remote import control

    class Mirror:
        closed = False

        @property
        def ended(self) -> bool:
            raise KeyboardInterrupt  # Ctrl+C while the watch waits

        def start(self) -> None:
            pass

        def close(self) -> None:
            Mirror.closed = True

    mirrors = {name: Mirror() for name in ("events.jsonl", "console.log")}
    client = types.SimpleNamespace(close=lambda: None)
    monkeypatch.setattr(control, "read_record", lambda run_dir: types.SimpleNamespace(machine="box"))
    monkeypatch.setattr(control, "client_for", lambda record: client)
    monkeypatch.setattr(control, "follow_files", lambda client, record, run_dir: mirrors)
    assert cli(["remote", "watch", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err
    assert "Stopped watching; the run goes on on box" in err and Mirror.closed
