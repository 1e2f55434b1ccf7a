"""Imports of runs copied back from elsewhere: links never followed, `..` refused, zip bombs measured first."""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

import pytest

from studio.core.runs import run_import
from studio.core.runs.history import import_run, list_runs
from studio.core.runs.run_import import ImportRefused


def never_alive(_run: Path) -> bool:
    return False


def _zip_run(finished_run: Path, archive: Path, prefix: str = "pod-run/") -> zipfile.ZipFile:
    z = zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED)
    for f in sorted(finished_run.rglob("*")):
        if f.is_file():  # ZipInfo keeps the name as given (ZipFile.write would strip a leading "/")
            z.writestr(zipfile.ZipInfo(prefix + f.relative_to(finished_run).as_posix()), f.read_bytes())
    return z


def test_a_folder_with_a_link_up_and_a_link_to_a_secret_is_refused_quickly(tmp_path: Path,
                                                                           finished_run: Path) -> None:
    secret = tmp_path / "id_ed25519"
    secret.write_text("PRIVATE KEY")
    (finished_run / "up").symlink_to("..")
    runs = tmp_path / "project" / "runs"
    started = time.monotonic()
    with pytest.raises(ImportRefused, match=r"refused 'up': a link to .*outside the run folder"):
        import_run(finished_run, runs)
    assert time.monotonic() - started < 5  # no recursive copy through the link
    (finished_run / "up").unlink()
    (finished_run / "samples").mkdir()
    (finished_run / "samples" / "key.txt").symlink_to(secret)
    with pytest.raises(ImportRefused, match=r"refused 'samples/key\.txt'"):
        import_run(finished_run, runs)
    assert list(runs.iterdir()) == []
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p.read_bytes() == b"PRIVATE KEY" and p != secret]


def test_a_link_inside_the_run_is_copied_as_a_link(tmp_path: Path, finished_run: Path) -> None:
    (finished_run / "latest.jsonl").symlink_to("events.jsonl")
    dest = import_run(finished_run, tmp_path / "project" / "runs")
    assert (dest / "latest.jsonl").is_symlink() and os.readlink(dest / "latest.jsonl") == "events.jsonl"


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
