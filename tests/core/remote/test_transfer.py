"""Sending a bundle and bringing a folder back: only what changed travels, with rsync or with sftp.

The machine is a real sshd on 127.0.0.1 (tests/fixtures/sshd.py); the project is the demo's.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from fixtures.sshd import SshServer

from studio.core.config.files.toml_file import save_config
from studio.core.project.folder import Project
from studio.core.remote.machines import RemoteMachine
from studio.core.remote.probe import probe_machine
from studio.core.remote.ssh import RemoteError, SshClient
from studio.core.remote.start import project_folder_name, send_bundle
from studio.core.remote.transfer import LocalFile, pull_folder, send_files


@pytest.fixture(params=["rsync", "sftp"])
def tool(request: pytest.FixtureRequest) -> str:
    if request.param == "rsync" and shutil.which("rsync") is None:  # the machine is this computer
        pytest.skip("rsync is not installed (apt-get install rsync)")
    return str(request.param)


def test_a_second_send_of_an_unchanged_dataset_copies_no_image(demo: Project, remote_machine: RemoteMachine,
                                                               sshd: SshServer, tool: str) -> None:
    client = SshClient(remote_machine)
    report = dataclasses.replace(probe_machine(client), rsync=tool == "rsync")
    project = f"{project_folder_name(demo.config_path)}-{tool}"
    first = send_bundle(client, report, demo.config_path, project, 1, None)
    images = sorted(p for p in (demo.root / "data" / "shapes").iterdir() if p.suffix == ".png")
    assert first.report.tool == tool and first.images_copied == first.dataset_files > len(images) > 0
    bundle = Path(first.bundle_dir)
    assert bundle == sshd.workspace.resolve() / project
    assert (bundle / "launch.sh").stat().st_mode & 0o111  # still a script there
    assert (bundle / "dataset" / "shapes" / images[0].name).read_bytes() == images[0].read_bytes()
    config = (bundle / "config.toml").read_text()
    assert f'base = "{report.workspace}/models/' in config  # the local base model went to the machine's models/
    assert first.model_copied and (Path(report.workspace) / first.model_copied[0]).is_file()

    again = send_bundle(client, report, demo.config_path, project, 1, None)
    assert again.images_copied == 0 and again.model_copied == []
    # Only what an export writes anew travels: the bundle's date and the README and config headers.
    assert set(again.bundle_copied) <= {"bundle.json", "README.md", "config.toml"}
    if tool == "sftp":
        return  # which files differ is decided the same way for both

    caption = demo.root / "data" / "shapes" / images[0].with_suffix(".txt").name
    caption.write_text("a changed caption\n")
    images[1].unlink()
    third = send_bundle(client, report, demo.config_path, project, 1, None)
    assert [r for r in third.bundle_copied if r.startswith("dataset/shapes/")] == [f"dataset/shapes/{caption.name}"]
    # The image and its caption (which the trainer no longer reads) leave the machine; the local
    # caption file stays where it is.
    orphan = images[1].with_suffix(".txt")
    assert sorted(third.removed) == sorted([f"dataset/shapes/{images[1].name}", f"dataset/shapes/{orphan.name}"])
    assert not (bundle / "dataset" / "shapes" / images[1].name).exists() and orphan.is_file()
    manifest = json.loads((bundle / "dataset" / "manifest.json").read_text())
    assert len(manifest["files"]) == third.dataset_files == first.dataset_files - 2


def test_awkward_names_go_there_and_come_back_and_a_cut_off_pull_continues(
    remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, tool: str
) -> None:
    client = SshClient(remote_machine)
    mine = tmp_path / "mine"
    mine.mkdir()
    files = {"events.jsonl": b'{"type": "step"}\n' * 500, "samples/step 1 [a].png": b"png" * 100,
             "checkpoints/step-2/state.bin": b"\0" * 1000, "it's \"odd\" #1 {x} *?.txt": b"odd"}
    for number, data in enumerate(files.values()):
        (mine / f"file {number}").write_bytes(data)
    sent = [LocalFile(mine / f"file {number}", rel) for number, rel in enumerate(files)]
    there = f"{sshd.workspace}/pull {tool}"
    assert sorted(send_files(client, sent, there, tool == "rsync").copied) == sorted(files)
    assert send_files(client, sent, there, tool == "rsync").copied == []

    here = tmp_path / "run"
    report = pull_folder(client, there, here, tool == "rsync", skip=["checkpoints/"])
    assert sorted(report.copied) == sorted(r for r in files if not r.startswith("checkpoints/"))
    assert not (here / "checkpoints").exists()
    cut = here / "events.jsonl"
    cut.write_bytes(files["events.jsonl"][:1000])  # a pull that was cut off
    Path(there, "events.jsonl").write_bytes(files["events.jsonl"] * 2)  # ... while the run went on
    again = pull_folder(client, there, here, tool == "rsync", skip=["checkpoints/"])
    assert again.copied == ["events.jsonl"] and again.unchanged == 2
    for rel, data in files.items():
        if not rel.startswith("checkpoints/"):
            assert (here / rel).read_bytes() == (data * 2 if rel == "events.jsonl" else data), rel


class _WindowsOs:
    """The os module as transfer.py sees it on Windows."""

    name = "nt"

    def __getattr__(self, attribute: str) -> object:
        import os

        return getattr(os, attribute)


def test_a_windows_computer_sends_with_sftp_even_with_an_rsync_port_on_its_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.core.remote import transfer

    monkeypatch.setattr(transfer.shutil, "which", lambda name: rf"C:\cwrsync\bin\{name}.exe")
    assert transfer.has_local_rsync()  # elsewhere rsync is used when it is there
    monkeypatch.setattr(transfer, "os", _WindowsOs())
    assert not transfer.has_local_rsync()  # it would read C:\... as a host named C


def test_a_pull_cut_off_midway_leaves_no_half_file_under_its_final_name(
    remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, tool: str
) -> None:
    """The Wi-Fi drops while the LoRA comes back: the run folder must not hold a cut-short file under the
    LoRA's own name (a person would copy it into their image tool); the next pull finishes it."""
    import os
    import threading
    import time

    client = SshClient(remote_machine)
    there = sshd.workspace / f"cut pull {tool}"
    (there / "output").mkdir(parents=True)
    lora = os.urandom(3 * 2**20)
    (there / "output" / "lora.safetensors").write_bytes(lora)
    here = tmp_path / "run"
    real_call = client.call
    cut = threading.Event()

    def drop_when_bytes_arrive() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(p.is_file() and p.stat().st_size > 0 for p in here.rglob("*")):
                sshd.kill_sessions()  # the connection drops mid-file
                cut.set()
                return
            time.sleep(0.01)

    def slow_call(argv: list[str], doing: str, timeout_s: float, check: bool = True,
                  stdin_text: str | None = None) -> object:
        # Slowed down (256 KB/s) so that the copy is surely under way when the connection drops.
        slowed = [argv[0], "--bwlimit=256"] if tool == "rsync" else [argv[0], "-l", "2048"]
        watcher = threading.Thread(target=drop_when_bytes_arrive)
        watcher.start()
        try:
            return real_call([*slowed, *argv[1:]], doing, timeout_s, check, stdin_text)
        finally:
            watcher.join()

    client.call = slow_call  # type: ignore[method-assign]
    with pytest.raises(RemoteError):
        pull_folder(client, str(there), here, tool == "rsync")
    assert cut.is_set()
    assert not (here / "output" / "lora.safetensors").exists()

    client.call = real_call  # type: ignore[method-assign]
    again = pull_folder(client, str(there), here, tool == "rsync")
    assert again.copied == ["output/lora.safetensors"]
    assert (here / "output" / "lora.safetensors").read_bytes() == lora
    assert sorted(p.name for p in (here / "output").iterdir()) == ["lora.safetensors"]  # nothing half-done left


def test_an_edit_runs_sample_event_brings_the_control_image_its_samples_edit(
        remote_machine: RemoteMachine, sshd: SshServer, tmp_path: Path, tool: str) -> None:
    """The Train page shows the control (the "before") beside a remote edit run's samples: it comes with them."""
    from studio.core.remote.control import RemoteRunRecord, _sample_fetcher

    there = sshd.workspace / f"edit-samples-{tmp_path.name}-{tool}"
    (there / "samples").mkdir(parents=True)
    (there / "samples" / "step-000004-0.png").write_bytes(b"after")
    (there / "samples" / "control-0.png").write_bytes(b"before")
    here = tmp_path / "run"
    here.mkdir()
    record = RemoteRunRecord("box", "", "", str(there), "", "", "", "nohup", tool, 0, 0.0)
    event = {"v": 1, "type": "sample", "time": 1.0, "step": 4, "prompts": ["make it red"],
             "images": [f"{there}/samples/step-000004-0.png"], "controls": [f"{there}/samples/control-0.png"]}
    _sample_fetcher(SshClient(remote_machine), record, here)([json.dumps(event).encode() + b"\n"])
    assert (here / "samples" / "step-000004-0.png").read_bytes() == b"after"
    assert (here / "samples" / "control-0.png").read_bytes() == b"before"


def test_a_mask_folder_outside_the_images_goes_to_the_machine_with_them(demo: Project, remote_machine: RemoteMachine,
                                                                         sshd: SshServer) -> None:
    masks = demo.root / "masks"
    masks.mkdir()
    image = sorted((demo.root / "data" / "shapes").glob("*.png"))[0]
    (masks / image.name).write_bytes(b"a mask")
    config = demo.load_config()
    config.dataset.masks, config.dataset.mask_folder = "folder", "masks"
    save_config(config, demo.config_path)
    client = SshClient(remote_machine)
    report = dataclasses.replace(probe_machine(client), rsync=False)
    sent = send_bundle(client, report, demo.config_path, project_folder_name(demo.config_path), 1, None)
    bundle = Path(sent.bundle_dir)
    assert (bundle / "dataset" / "masks" / image.name).read_bytes() == b"a mask"
    assert 'mask_folder = "dataset/masks"' in (bundle / "config.toml").read_text()
