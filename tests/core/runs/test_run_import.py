"""Imports of runs copied back from elsewhere: links never followed, `..` refused, zip bombs measured first."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import zipfile
from pathlib import Path

import pytest

from studio.core.containment import is_link_out
from studio.core.runs.records import run_import
from studio.core.runs.records.history import import_run, list_runs
from studio.core.runs.records.run_import import ImportRefused


def never_alive(_run: Path) -> bool:
    return False


def _zip_run(finished_run: Path, archive: Path, prefix: str = "pod-run/") -> zipfile.ZipFile:
    z = zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED)
    for f in sorted(finished_run.rglob("*")):
        if f.is_file():  # ZipInfo keeps the name as given (ZipFile.write would strip a leading "/")
            z.writestr(zipfile.ZipInfo(prefix + f.relative_to(finished_run).as_posix()), f.read_bytes())
    return z


def _import_within(source: Path, runs: Path, seconds: float = 30.0) -> tuple[Path, list[str]]:
    """import_run on a thread with a ceiling: an import that blocks (a FIFO opened) fails here, never hangs."""
    said: list[str] = []
    result: list[Path | BaseException] = []

    def work() -> None:
        try:
            result.append(import_run(source, runs, said.append))
        except BaseException as exc:  # handed to the test
            result.append(exc)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"the import of {source} was still running after {seconds:.0f} s"
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0], said


def _links_out(folder: Path) -> list[str]:
    return [f"{p} -> {os.readlink(p)}" for p in folder.rglob("*") if p.is_symlink() and is_link_out(p, folder)]


def test_links_up_and_to_a_secret_are_left_out_quickly_and_named(tmp_path: Path, finished_run: Path) -> None:
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    (finished_run / "up").symlink_to("..")
    (finished_run / "samples").mkdir()
    (finished_run / "samples" / "key.txt").symlink_to(secret)
    runs = tmp_path / "project" / "runs"
    started = time.monotonic()
    dest, said = _import_within(finished_run, runs)
    assert time.monotonic() - started < 5  # no recursive copy through the link
    assert not (dest / "up").exists() and not (dest / "samples" / "key.txt").exists() and _links_out(dest) == []
    assert any("left out 'up': a link to" in s and "outside the run folder" in s for s in said), said
    assert any(f"left out 'samples/key.txt': a link to {secret}" in s for s in said), said
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p.read_bytes() == b"PRIVATE KEY" and p != secret]
    assert [r.status for r in list_runs(runs, never_alive)] == ["completed"]


def test_an_absolute_link_to_a_file_of_the_run_becomes_a_copy_of_it(tmp_path: Path, finished_run: Path) -> None:
    (finished_run / "output").mkdir()
    weights = finished_run / "output" / "pytorch_lora_weights.safetensors"
    weights.write_bytes(b"weights")
    (finished_run / "latest.safetensors").symlink_to(weights.resolve())  # absolute: names the source run
    (finished_run / "output-link").symlink_to((finished_run / "output").resolve())
    dest, said = _import_within(finished_run, tmp_path / "project" / "runs")
    latest = dest / "latest.safetensors"
    assert not latest.is_symlink() and latest.read_bytes() == b"weights"
    assert not (dest / "output-link").exists() and _links_out(dest) == []
    assert said == [f"{finished_run}: left out 'output-link': a link by absolute name to a folder "
                    f"({(finished_run / 'output').resolve()}); the run's own files are imported under their own names"]
    shutil.rmtree(finished_run)  # the copy stands on its own
    assert latest.read_bytes() == b"weights"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_in_the_run_folder_is_left_out_unopened_and_named(tmp_path: Path, finished_run: Path) -> None:
    (finished_run / "samples").mkdir()
    os.mkfifo(finished_run / "samples" / "preview.pipe")
    outside = tmp_path / "notes.txt"
    outside.write_text("outside")
    (finished_run / "notes.txt").symlink_to(outside)
    runs = tmp_path / "project" / "runs"
    dest, said = _import_within(finished_run, runs)
    assert not (dest / "samples" / "preview.pipe").exists() and _links_out(dest) == []
    assert (dest / "events.jsonl").read_bytes() == (finished_run / "events.jsonl").read_bytes()
    assert f"{finished_run}: left out 'samples/preview.pipe': a named pipe (FIFO), not a file; special files " \
           "are never opened or copied (the rest of the run was imported)" in said
    assert len(said) == 2 and "left out 'notes.txt': a link to" in said[0]
    assert json.loads((dest / "remote.json").read_text())["left_out"] == said
    assert [r.status for r in list_runs(runs, never_alive)] == ["completed"]


@pytest.mark.parametrize("prefix", ["../", "/abs/", "C:/", ".."])
def test_a_zip_whose_run_folder_is_not_a_plain_name_is_refused(tmp_path: Path, finished_run: Path,
                                                               prefix: str) -> None:
    archive = tmp_path / "odd.zip"
    with _zip_run(finished_run, archive, prefix if prefix.endswith("/") else prefix + "/"):
        pass
    runs = tmp_path / "project" / "runs"
    with pytest.raises(ValueError, match=r"refused|not a plain folder name"):
        import_run(archive, runs)
    assert list_runs(runs, never_alive) == [] and list(runs.iterdir()) == []


def test_a_zipped_link_is_refused(tmp_path: Path, finished_run: Path) -> None:
    archive = tmp_path / "link.zip"
    with _zip_run(finished_run, archive) as z:
        info = zipfile.ZipInfo("pod-run/samples/key")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "/home/someone/.ssh/id_ed25519")
    with pytest.raises(ImportRefused, match=r"refused 'pod-run/samples/key': a symbolic link"):
        import_run(archive, tmp_path / "runs")


def test_a_zip_bomb_is_refused_before_a_byte_is_written(tmp_path: Path, finished_run: Path) -> None:
    archive = tmp_path / "bomb.zip"
    with _zip_run(finished_run, archive) as z, z.open("pod-run/output/zeros.bin", "w", force_zip64=True) as member:
        for _ in range(64):
            member.write(bytes(1 << 20))  # 64 MiB of zeros: about 64 KB in the archive
    assert archive.stat().st_size < 200_000
    runs = tmp_path / "project" / "runs"
    started = time.monotonic()
    with pytest.raises(ImportRefused, match=r"refused 'pod-run/output/zeros\.bin': \d+ bytes that unpack to 67108864"):
        import_run(archive, runs)
    assert time.monotonic() - started < 2 and list(runs.iterdir()) == []


def test_an_import_larger_than_the_free_space_is_refused(tmp_path: Path, finished_run: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "big.zip"
    with _zip_run(finished_run, archive) as z:
        z.writestr("pod-run/output/weights.safetensors", os.urandom(300_000))
    real = run_import.shutil.disk_usage

    def nearly_full(path: str | Path) -> object:
        usage = real(path)
        return type(usage)(usage.total, usage.total - 1000, run_import.SPARE_BYTES + 100_000)

    (finished_run / "output").mkdir()
    (finished_run / "output" / "weights.safetensors").write_bytes(os.urandom(300_000))
    monkeypatch.setattr(run_import.shutil, "disk_usage", nearly_full)
    runs = tmp_path / "project" / "runs"
    with pytest.raises(ImportRefused, match=r"needs 0\.00 GB but .* free; free some space"):
        import_run(archive, runs)
    with pytest.raises(ImportRefused, match="free some space"):
        import_run(finished_run, runs)  # a folder is measured too
    assert list(runs.iterdir()) == []


@pytest.mark.parametrize("damage", ["bit flipped", "deflate64", "encrypted"])
def test_a_damaged_zip_is_refused_in_words_naming_the_file(tmp_path: Path, finished_run: Path, damage: str) -> None:
    """A zip damaged on its way (one byte changed), or one Windows made with Deflate64 (its Explorer does for
    large files): the Runs page says which file and what to do, instead of failing with a traceback."""
    archive = tmp_path / "run.zip"
    with _zip_run(finished_run, archive) as z:
        z.writestr("pod-run/output/lora.safetensors", os.urandom(50_000))
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as z:
        info = z.getinfo("pod-run/output/lora.safetensors")
    if damage == "bit flipped":
        data[info.header_offset + 30 + len(info.filename) + 1000] ^= 0xFF  # inside the member's data
    else:  # the method (9: Deflate64), or the flag "encrypted", in the member's header and the central directory
        field, value = (8, 9) if damage == "deflate64" else (6, info.flag_bits | 1)
        data[info.header_offset + field] = value
        central = data.find(b"PK\x01\x02")
        while central >= 0:
            name_length = int.from_bytes(data[central + 28:central + 30], "little")
            if data[central + 46:central + 46 + name_length] == info.filename.encode():
                data[central + field + 2] = value
            central = data.find(b"PK\x01\x02", central + 4)
    archive.write_bytes(bytes(data))
    runs = tmp_path / "project" / "runs"
    said = "it is encrypted .*" if damage == "encrypted" else "cannot be unpacked .*"
    with pytest.raises(ImportRefused, match=rf"'pod-run/output/lora\.safetensors':? {said}; .*nothing was imported"):
        import_run(archive, runs)
    assert list(runs.iterdir()) == []


def test_a_zip_of_several_runs_is_refused_instead_of_importing_one_silently(tmp_path: Path,
                                                                           finished_run: Path) -> None:
    """`zip -r runs.zip runs/` on the machine holds every run: importing only the first one found (and
    saying nothing of the others) would look complete. It is refused, naming them."""
    archive = tmp_path / "runs.zip"
    with _zip_run(finished_run, archive, "runs/20260101-000000-a/") as z:
        for f in sorted(finished_run.rglob("*")):
            if f.is_file():
                z.writestr("runs/20260102-000000-b/" + f.relative_to(finished_run).as_posix(), f.read_bytes())
    runs = tmp_path / "project" / "runs"
    with pytest.raises(ImportRefused, match=r"holds 2 runs \('runs/20260101-000000-a', 'runs/20260102-000000-b'\)"):
        import_run(archive, runs)
    assert list(runs.iterdir()) == []


def test_on_windows_the_import_waits_for_the_antivirus_scanning_the_files_just_unpacked(
        tmp_path: Path, finished_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows refuses to rename a folder while another program has a file in it open, and its antivirus opens
    every file just written for a moment: importing a run failed now and then, with nothing imported."""
    import sys
    from typing import Any

    from studio.core import files

    class Windows:
        platform = "win32"

        def __getattr__(self, attribute: str) -> Any:
            return getattr(sys, attribute)

    monkeypatch.setattr(files, "sys", Windows())
    refused: list[str] = []

    def refusing(real: Any) -> Any:
        def move(source: Any, target: Any) -> None:
            if Path(source).name.startswith(".import-") and not refused:  # the unpacked run, while scanned
                refused.append(str(source))
                raise PermissionError(13, "Access is denied", str(source))
            real(source, target)
        return move

    monkeypatch.setattr(os, "replace", refusing(os.replace))
    monkeypatch.setattr(os, "rename", refusing(os.rename))
    _zip_run(finished_run, tmp_path / "copied.zip").close()
    runs = tmp_path / "project" / "runs"
    dest, _said = _import_within(tmp_path / "copied.zip", runs)
    assert refused and dest == runs / "pod-run"
    assert (dest / "events.jsonl").read_bytes() == (finished_run / "events.jsonl").read_bytes()
    assert [r.name for r in list_runs(runs, never_alive)] == ["pod-run"]
