"""File names and values chosen by someone else, through every route that moves files or starts processes.

One table of hostile names (a line break followed by `!cmd`, `;`, quotes, a backslash, `$()`,
backticks, `#`, NUL, bytes that are not UTF-8, a leading `-`, spaces, glob characters) goes
through sftp and rsync both ways, the sample images a run's events name, the remote shell
commands and accelerate.yaml. No command may run on this computer (each `touch` in a name
points at a marker file that must never appear); a name the route can carry arrives byte for
byte with its own content; one it cannot is refused with a message that names it. The
machine is the local sshd (tests/fixtures/sshd.py).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from fixtures.sshd import SshServer

from studio.core.config.errors import ConfigError
from studio.core.config.files.paths import resolve_paths
from studio.core.config.files.toml_file import validate_data
from studio.core.containment import contained_path
from studio.core.quoting import UnsafeNameError, shown
from studio.core.remote.control import RemoteRunRecord, _sample_fetcher, request_remote_stop
from studio.core.remote.machines import RemoteMachine
from studio.core.remote.ssh import RemoteError, SshClient
from studio.core.remote.start import local_run_folder
from studio.core.remote.transfer import LocalFile, fetch_files, pull_folder, send_files
from studio.core.runs.launch import prepare_run

yaml = pytest.importorskip("yaml")  # accelerate's YAML reader: in the studio's environment, not the core one


class Hostile(NamedTuple):
    label: str
    name: str
    sftp: bool  # whether sftp's batch can carry it (rsync carries every name but one with NUL)


def hostile_names(marker: Path) -> list[Hostile]:
    """The table; `marker` is where any command hidden in a name would write. `$IFS` stands for a space
    (the escaping would otherwise keep `touch /x` one word)."""
    m = f"$IFS{marker}"
    return [
        Hostile("line break then !cmd", f"nl\n!touch{m}-nl.png", False),
        Hostile("carriage return then !cmd", f"cr\r!touch{m}-cr.png", False),
        Hostile("tab", "tab\there.png", False),
        Hostile("starts with !", f"!touch{m}-bang.png", True),
        Hostile("semicolon", f"a;touch{m}-semi;b.png", True),
        Hostile("quotes", "it's \"quoted\".png", True),
        Hostile("backslash", "back\\slash\\n.png", True),
        Hostile("$()", f"$(touch{m}-dollar).png", True),
        Hostile("backtick", f"`touch{m}-tick`.png", True),
        Hostile("hash", "#not a comment #x.png", True),
        Hostile("not UTF-8", "latin\udce9.png", False),
        Hostile("leading -", "-rf.png", True),
        Hostile("leading --", "--help", True),
        Hostile("spaces", " lead  double trail .png", True),
        Hostile("glob", "*?[ab]{c}.png", True),
        Hostile("NUL", "nul\x00.png", False),
    ]


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "PWNED"
    yield path
    ran = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("PWNED"))
    assert ran == [], f"a command hidden in a file name ran on this computer: {ran}"


def first_piece(name: str) -> str | None:
    """The part of a name before its line break: a file of that name (there, or here for a send) lets sftp's
    first line succeed, so that a hidden `!command` on the next one is reached."""
    return name.split("\n", 1)[0] if "\n" in name else None


def content(name: str) -> bytes:
    return b"content of " + os.fsencode(name.replace("\x00", "NUL"))


def tool_of(request: pytest.FixtureRequest) -> str:
    if request.param == "rsync" and shutil.which("rsync") is None:
        pytest.skip("rsync is not installed (apt-get install rsync)")
    return str(request.param)


@pytest.fixture(params=["sftp", "rsync"])
def tool(request: pytest.FixtureRequest) -> str:
    return tool_of(request)


def carried(entry: Hostile, tool: str) -> bool:
    return entry.sftp if tool == "sftp" else "\x00" not in entry.name


def landed(here: Path, rel: str, tool: str) -> Path:
    """Where a pulled file is: sftp writes where the containment function puts it (a backslash is a folder
    there, as on Windows and in archives); rsync writes the name as it is."""
    return here / rel if tool == "rsync" else contained_path(here, rel)


def _plant(root: Path, rel: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content(rel))


# ------------------------------------------------------------ sending (dataset files)
def test_hostile_dataset_names_go_there_byte_for_byte_or_are_refused_naming_the_file(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, marker: Path, tool: str) -> None:
    client = SshClient(remote_machine)
    table = hostile_names(marker)
    mine = tmp_path / "dataset"
    files = []
    for entry in table:
        source = mine / entry.name.replace("\x00", "NUL")  # no file here can hold NUL: only its name there does
        _plant(mine, source.relative_to(mine).as_posix())
        files.append((entry, LocalFile(source, f"dataset/{entry.name}")))
        if first_piece(entry.name):
            _plant(mine, str(first_piece(entry.name)))
    there = sshd.workspace / f"send-{tmp_path.name}-{tool}"

    fine = [f for entry, f in files if carried(entry, tool)]
    assert sorted(send_files(client, fine, str(there), tool == "rsync").copied) == sorted(f.rel for f in fine)
    for item in fine:
        assert (there / item.rel).read_bytes() == item.source.read_bytes(), item.rel

    for entry, item in files:
        if carried(entry, tool):
            continue
        with pytest.raises(RemoteError) as refused:
            send_files(client, [item], str(there / "refused"), tool == "rsync")
        said = str(refused.value)
        assert "nothing was copied" in said and (shown(str(item.source)) in said or shown(item.rel) in said), said
        if tool == "sftp":
            assert "Rename the file here" in said and "install rsync" in said
    assert not (there / "refused").exists()


# ------------------------------------------------------------ pulling (remote pull)
def test_hostile_names_there_come_back_byte_for_byte_or_the_pull_is_refused_naming_them(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, marker: Path, tool: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # sftp's `get` without a destination would write here
    client = SshClient(remote_machine)
    table = [e for e in hostile_names(marker) if "\x00" not in e.name]
    there = sshd.workspace / f"pull-{tmp_path.name}-{tool}"
    fine = [e.name for e in table if carried(e, tool)]
    for rel in fine:
        _plant(there / "fine", rel)
    here = tmp_path / "run"
    report = pull_folder(client, str(there / "fine"), here, tool == "rsync")
    assert sorted(report.copied) == sorted(fine)
    for rel in fine:
        assert landed(here, rel, tool).read_bytes() == content(rel), rel

    for number, entry in enumerate(e for e in table if not carried(e, tool)):
        _plant(there / f"bad{number}", entry.name)
        _plant(there / f"bad{number}", "ordinary.png")
        if first_piece(entry.name):
            _plant(there / f"bad{number}", str(first_piece(entry.name)))
        with pytest.raises(RemoteError) as refused:
            pull_folder(client, str(there / f"bad{number}"), tmp_path / f"bad{number}", False)
        said = str(refused.value)
        assert shown(entry.name) in said and "Rename or remove them on box" in said, said
        assert "nothing was copied" in said and not (tmp_path / f"bad{number}" / "ordinary.png").exists()

    # NUL cannot be a name there; a listing that says so is refused before anything travels.
    with pytest.raises(RemoteError, match=r"refused 'nul\\x00.png': the name holds a NUL character"):
        fetch_files(client, str(there / "fine"), ["nul\x00.png"], tmp_path / "nul", tool == "rsync")


def test_a_path_longer_than_an_sftp_batch_line_is_refused_not_cut_into_a_command(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, marker: Path) -> None:
    """sftp reads its batch in lines of 2047 bytes: the rest of a longer line is a command of its own, and
    a rest that begins with `!` runs on this computer. The name is padded so that, in the line
    `get -p THERE/NAME HERE/NAME`, the second NAME's `!touch` begins the rest."""
    there = sshd.workspace / f"long-{tmp_path.name}"
    tail = f"!touch$IFS{marker}-long"
    here = tmp_path / "run"
    twice = 2047 - len(f"get -p {there}/{tail} {here}/")  # the padding's bytes, twice over
    if twice % 2:
        here = tmp_path / "runs"
        twice -= 1
    pad = ("d" * 199 + "/") * (twice // 2 // 200) + "e" * (twice // 2 % 200)
    _plant(there, pad + tail)
    with pytest.raises(RemoteError, match=r"over the 2046 that sftp reads as one line.*nothing was copied"):
        pull_folder(SshClient(remote_machine), str(there), here, False)
    assert [p for p in here.rglob("*") if p.is_file()] == []


# ------------------------------------------------------------ sample images named by a run's events (remote watch)
def test_sample_events_naming_hostile_images_fetch_what_can_travel_and_run_nothing(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, marker: Path, tool: str,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    table = hostile_names(marker)
    there = sshd.workspace / f"samples-{tmp_path.name}-{tool}"
    for entry in table:
        if "\x00" not in entry.name:
            _plant(there, f"samples/{entry.name}")
        if first_piece(entry.name):
            _plant(there, f"samples/{first_piece(entry.name)}")
    here = tmp_path / "run"
    here.mkdir()
    record = RemoteRunRecord("box", "", "", str(there), "", "", "", "nohup", tool, 0, 0.0)
    names = table  # JSON carries a name that is not UTF-8 too (as \udce9): the remote writes its events
    event = {"v": 1, "type": "sample", "time": 1.0, "step": 5, "prompts": ["x"],
             "images": [f"{there}/samples/{e.name}" for e in names]}
    _sample_fetcher(SshClient(remote_machine), record, here)([json.dumps(event).encode() + b"\n"])
    for entry in names:
        if carried(entry, tool):
            arrived = landed(here, f"samples/{entry.name}", tool)
            assert arrived.read_bytes() == content(f"samples/{entry.name}"), entry.label
        else:
            assert not (here / "samples" / entry.name.replace("\x00", "NUL")).exists(), entry.label
            assert repr(f"samples/{entry.name}") in caplog.text or "NUL character" in caplog.text, entry.label


# ------------------------------------------------------------ remote shell commands (ssh)
def test_hostile_run_folders_there_stay_one_word_in_the_remote_shell(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, marker: Path) -> None:
    client = SshClient(remote_machine)
    base = sshd.workspace / f"stop-{tmp_path.name}"
    for entry in hostile_names(marker):
        folder = base / entry.name
        record = RemoteRunRecord("box", "", "", str(folder), "", "", "", "nohup", "sftp", 0, 0.0)
        if "\x00" in entry.name:
            with pytest.raises(RemoteError, match=r"the path there the name '.*nul\\x00.png/STOP' holds a NUL byte"):
                request_remote_stop(client, record)
            continue
        folder.mkdir(parents=True)
        request_remote_stop(client, record)
        assert (folder / "STOP").read_text() == "stop requested\n", entry.label
    assert sorted(p.name for p in base.iterdir() if p.is_file()) == []  # nothing written beside the folders


# ------------------------------------------------------------ accelerate.yaml
def test_hostile_addresses_stay_one_value_in_accelerate_yaml_or_are_refused_naming_the_key(
        tmp_path: Path, marker: Path) -> None:
    base = {"model": {"family": "sd15", "base": "m/n"}}
    for number, entry in enumerate(hostile_names(marker)):
        value = f"10.0.0.1\nnum_machines: 99\n{entry.name}" if entry.label == "line break then !cmd" else entry.name
        output = {"dir": str(tmp_path / f"runs{number}")}
        if value.isprintable() and not any(char.isspace() for char in value):
            config = validate_data({**base, "output": output, "launch": {"num_processes": 2, "main_process_ip": value}})
            plan = prepare_run(resolve_paths(config, tmp_path))
            written = yaml.safe_load((plan.run_dir / "accelerate.yaml").read_text(encoding="utf-8"))
            assert written["main_process_ip"] == value and written["num_machines"] == 1, entry.label
            continue
        # The config refuses it, naming the setting ...
        with pytest.raises(ConfigError) as invalid:
            validate_data({**base, "launch": {"main_process_ip": value}})
        assert "launch.main_process_ip" in invalid.value.describe() and shown(value) in invalid.value.describe()
        if value.isprintable():  # a space: no host's name, though YAML would carry it
            continue
        # ... and so does the writer, for a value that came another way (a node's --main-ip).
        config = validate_data({**base, "output": output, "launch": {"num_processes": 2}})
        config.launch = config.launch.model_copy(update={"main_process_ip": value})
        with pytest.raises(UnsafeNameError) as refused:
            prepare_run(resolve_paths(config, tmp_path))
        said = str(refused.value)
        assert said.startswith(f"accelerate.yaml: main_process_ip = {shown(value)} holds "), said
        assert "only printable text on one line is allowed for main_process_ip" in said, said
        assert not (tmp_path / f"runs{number}").exists(), "no half-written run folder"


# ------------------------------------------------------------ the run's folder here, named by the machine
def test_the_run_folder_the_machine_names_stays_inside_the_runs_folder(tmp_path: Path) -> None:
    machine = RemoteMachine("box", "127.0.0.1", port=2222)
    runs = tmp_path / "project" / "runs"

    def record(there: str) -> RemoteRunRecord:
        return RemoteRunRecord("box", "", "", there, "", "", "", "nohup", "sftp", 42, 0.0)

    assert local_run_folder(runs, record("/ws/p/runs/20260101-run/"), machine) == runs / "20260101-run"
    # A run here of the same name (trained here, or brought back from another machine) is never taken over.
    (runs / "20260101-run").mkdir(parents=True)
    (runs / "20260101-run" / "events.jsonl").write_text("{}\n")
    assert local_run_folder(runs, record("/ws/p/runs/20260101-run/"), machine) == runs / "20260101-run-2"
    for there in ("/ws/p/runs/..", "/ws/p/runs/..\\..\\home", "/ws/p/runs/C:x", "/"):
        with pytest.raises(RemoteError) as refused:
            local_run_folder(runs, record(there), machine)
        said = str(refused.value)
        assert "the run folder launch.sh named: refused" in said and f"only names inside {runs}" in said, said
        assert f"stop it with `ssh -p 2222 127.0.0.1 touch {shlex.quote(there + '/STOP')}`" in said, said
