"""A hub snapshot in the cache is checked end to end before training trusts it (no huggingface_hub needed)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from studio.core.models.snapshot_check import snapshot_problems

COMMIT = "c0ffee" + "0" * 34


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _cache(tmp_path: Path, files: dict[str, bytes]) -> tuple[Path, Path]:
    """A repository's cache folder laid out as huggingface_hub does: blobs named by hash, relative links."""
    storage = tmp_path / "hub" / "models--org--name"
    snapshot = storage / "snapshots" / COMMIT
    (storage / "blobs").mkdir(parents=True)
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest() if len(data) > 1024 else _git_sha1(data)
        blob = storage / "blobs" / digest
        blob.write_bytes(data)
        pointer = snapshot / name
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    return storage, snapshot


def test_a_snapshot_as_the_hub_makes_it_passes(tmp_path: Path) -> None:
    storage, snapshot = _cache(tmp_path, {"model_index.json": b"{}", "unet/w.safetensors": os.urandom(2048)})
    assert snapshot_problems(storage, snapshot) == []


def test_a_link_outside_the_cache_is_named_and_not_read(tmp_path: Path) -> None:
    storage, snapshot = _cache(tmp_path, {"model_index.json": b"{}"})
    elsewhere = tmp_path / "elsewhere.safetensors"
    elsewhere.write_bytes(b"planted")
    (snapshot / "unet").mkdir()
    (snapshot / "unet" / "w.safetensors").symlink_to(elsewhere)
    (snapshot / "vae").symlink_to(tmp_path)  # a folder link would hide what lies behind it
    found = {str(p) for p in snapshot_problems(storage, snapshot)}
    assert found == {f"unet/w.safetensors links outside the cache folder {storage}, to {elsewhere}",
                     "vae is a link to a folder, not a file"}


@pytest.mark.parametrize("name", ["model_index.json", "unet/w.safetensors"])
def test_a_blob_whose_bytes_are_not_its_hash_is_named(tmp_path: Path, name: str) -> None:
    storage, snapshot = _cache(tmp_path, {"model_index.json": b'{"a": 1}', "unet/w.safetensors": b"w" * 2048})
    blob = Path(os.path.realpath(snapshot / name))
    blob.write_bytes(b"x" * blob.stat().st_size)  # same size, other bytes
    (problem,) = snapshot_problems(storage, snapshot)
    kind = "sha256" if name.endswith(".safetensors") else "git-sha1"
    assert problem.name == name and f"does not match the hash the hub announced ({kind} {blob.name}" in problem.why


def test_a_file_not_the_one_the_listing_announced_is_named(tmp_path: Path) -> None:
    storage, snapshot = _cache(tmp_path, {"model_index.json": b"{}"})
    (problem,) = snapshot_problems(storage, snapshot, {"model_index.json": "0" * 40})
    assert str(problem) == f"model_index.json is the blob {_git_sha1(b'{}')}, the hub announced {'0' * 40}"
