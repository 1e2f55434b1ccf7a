"""A machine that lies: its file list and sample events name `../`, absolute and linked paths.

The machine is the local sshd; its "Python" is a script that answers the studio's listing with
hostile names (what whoever controls a rented machine can do). Nothing may land outside the
run's local folder, with rsync or with sftp.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pytest
from fixtures.sshd import SshServer

from studio.core.remote.control import RemoteRunRecord, _sample_fetcher
from studio.core.remote.machines import RemoteMachine
from studio.core.remote.ssh import RemoteError, SshClient
from studio.core.remote.transfer import fetch_files, pull_folder

HOSTILE = ["../../PWNED.txt", "/tmp/studio-hostile-absolute.txt", "samples/../../../PWNED2.txt", "out/x.txt"]


@pytest.fixture(params=["rsync", "sftp"])
def tool(request: pytest.FixtureRequest) -> str:
    if request.param == "rsync" and shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (apt-get install rsync)")
    return str(request.param)


def _layout(sshd: SshServer, tmp_path: Path) -> tuple[Path, Path]:
    """A run folder there (with files planted beside it) and the project's run folder here."""
    there = sshd.workspace / f"hostile-{tmp_path.name}" / "a" / "run"
    (there / "samples").mkdir(parents=True)
    (there / "out").mkdir()
    for planted in (there.parent.parent / "PWNED.txt", there.parent.parent.parent / "PWNED2.txt"):
        planted.write_text("echo owned\n")
    (there / "out" / "x.txt").write_text("fine")
    here = tmp_path / "project" / "runs" / "run"
    here.mkdir(parents=True)
    (tmp_path / "project" / "studio.toml").write_text("kept\n")
    return there, here


def _nothing_outside(here: Path, tmp_path: Path) -> None:
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and here not in p.parents]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in outside) == ["project/studio.toml"]
    assert (tmp_path / "project" / "studio.toml").read_text() == "kept\n"
    assert not Path("/tmp/studio-hostile-absolute.txt").exists()


def test_a_lying_file_list_brings_nothing_outside_the_run(remote_machine: RemoteMachine, sshd: SshServer,
                                                          tmp_path: Path, tool: str) -> None:
    there, here = _layout(sshd, tmp_path)
    liar = there.parent / "python-there"
    listing = {"exists": True, "files": {name: 11 for name in HOSTILE}}
    liar.write_text(f"#!/bin/sh\ncat > /dev/null\necho '{json.dumps(listing)}'\n")
    liar.chmod(0o755)
    client = SshClient(dataclasses.replace(remote_machine, python=str(liar)))
    with pytest.raises(RemoteError, match=r"refused '\.\./\.\./PWNED\.txt': the name climbs out"):
        pull_folder(client, str(there), here, tool == "rsync")
    _nothing_outside(here, tmp_path)


def test_a_sample_event_naming_paths_outside_fetches_only_its_own_images(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, tool: str,
        caplog: pytest.LogCaptureFixture) -> None:
    there, here = _layout(sshd, tmp_path)
    (there / "samples" / "ok.png").write_bytes(b"png")
    (here / "samples").mkdir()
    record = RemoteRunRecord("box", "", "", str(there), "", "", "", "nohup", tool, 0, 0.0)
    event = {"v": 1, "type": "sample", "time": 1.0, "step": 5, "prompts": ["x"],
             "images": [*HOSTILE, f"{there}/../../PWNED.txt", f"{there}/samples/ok.png"]}
    client = SshClient(remote_machine)
    _sample_fetcher(client, record, here)([json.dumps(event).encode()])
    assert (here / "samples" / "ok.png").read_bytes() == b"png"
    assert (here / "out" / "x.txt").read_text() == "fine"  # a plain name is still fetched
    _nothing_outside(here, tmp_path)
    assert "refused '../../PWNED.txt'" in caplog.text


def test_a_link_here_that_leads_out_is_never_written_through(remote_machine: RemoteMachine, sshd: SshServer,
                                                             tmp_path: Path, tool: str) -> None:
    there, here = _layout(sshd, tmp_path)
    (there / "samples" / "ok.png").write_bytes(b"png")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (here / "samples").symlink_to(outside)
    with pytest.raises(RemoteError, match="a link on the way leads to"):
        fetch_files(SshClient(remote_machine), str(there), ["samples/ok.png"], here, tool == "rsync")
    assert list(outside.iterdir()) == []



def test_a_send_larger_than_the_free_space_there_is_refused_before_copying(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, tool: str) -> None:
    from studio.core.remote.transfer import LocalFile, send_files

    there = sshd.workspace / f"small-disk-{tmp_path.name}-{tool}"
    small = there.parent / f"python-small-disk-{tmp_path.name}"  # the real Python, on a disk of 1 MB free
    small.write_text(f"#!/bin/sh\n\"{sys.executable}\" \"$@\" | sed -e 's/\"free\": [0-9]*/\"free\": 1000000/'\n")
    small.chmod(0o755)
    client = SshClient(dataclasses.replace(remote_machine, python=str(small)))
    data = tmp_path / "weights.bin"
    data.write_bytes(b"w" * 2_000_000)
    with pytest.raises(RemoteError, match=r"has 0\.00 GB free, and this send needs 0\.00 GB \(1 file\(s\)\)"):
        send_files(client, [LocalFile(data, "models/weights.bin")], str(there), tool == "rsync")
    assert not (there / "models" / "weights.bin").exists()


def test_the_machine_never_replaces_the_studios_own_record_of_the_run(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, tool: str) -> None:
    """remote.json here names the machine and the process that Stop, Kill and Pull reach: a machine whose sample
    events or file list name it (plainly, or as `samples/./remote.json`, which rsync writes as `remote.json`)
    never replaces it, and the run's other files still come."""
    from studio.core.remote.control import pull_run

    there, here = _layout(sshd, tmp_path)
    ours = '{"machine": "box"}\n'
    (here / "remote.json").write_text(ours)
    for planted in (there / "remote.json", there / "samples" / "remote.json", there / "process.json"):
        planted.write_text('{"machine": "another-of-yours", "pid": 1}\n')
    (there / "samples" / "ok.png").write_bytes(b"png")
    record = RemoteRunRecord("box", "", "", str(there), "", "", "", "nohup", tool, 0, 0.0)
    client = SshClient(remote_machine)
    event = {"v": 1, "type": "sample", "time": 1.0, "step": 5, "prompts": ["x"],
             "images": ["remote.json", f"{there}/remote.json", "samples/./remote.json", "./process.json",
                        f"{there}/samples/ok.png"]}
    _sample_fetcher(client, record, here)([json.dumps(event).encode()])
    assert (here / "samples" / "ok.png").read_bytes() == b"png"
    assert (here / "remote.json").read_text() == ours and not (here / "process.json").exists()

    pull_run(client, record, here, state=(True, None))  # the machine's own listing
    assert (here / "out" / "x.txt").read_text() == "fine"
    assert (here / "remote.json").read_text() == ours and not (here / "process.json").exists()

    def lying(files: dict[str, int]) -> SshClient:  # a listing that names what the pull leaves out
        liar = there.parent / "python-there"
        liar.write_text(f"#!/bin/sh\ncat > /dev/null\necho '{json.dumps({'exists': True, 'files': files})}'\n")
        liar.chmod(0o755)
        return SshClient(dataclasses.replace(remote_machine, python=str(liar)))

    pull_run(lying({"remote.json": 44, "process.json": 44, "samples/ok.png": 3}), record, here, state=(True, None))
    assert (here / "remote.json").read_text() == ours and not (here / "process.json").exists()
    with pytest.raises(RemoteError, match=r"refused 'samples/\./remote\.json': the name holds a '\.' folder"):
        pull_run(lying({"samples/./remote.json": 44}), record, here, state=(True, None))
    assert (here / "remote.json").read_text() == ours
