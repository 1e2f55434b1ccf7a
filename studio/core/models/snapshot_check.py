"""A downloaded hub snapshot checked end to end, without huggingface_hub (the core runs without it).

A snapshot (`<cache>/models--org--name/snapshots/<commit>/`) is what the trainer loads: its
files are links into `blobs/`, each blob named by the hash the hub announced for it (the
sha256 of a file kept in LFS, git's blob sha1 of a small one). A hostile or broken endpoint
can make a link lead beside the cache or a blob hold other bytes than its name says; this
finds both before a training reads them. Links are resolved, never followed out to read.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from studio.core.containment import is_link_out

SHA256 = re.compile(r"^[0-9a-f]{64}$")
GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")
COMMIT = GIT_SHA1  # a git commit hash, as the hub answers in X-Repo-Commit


@dataclass(frozen=True)
class SnapshotProblem:
    name: str  # the file, relative to the snapshot, with /
    why: str

    def __str__(self) -> str:
        return f"{self.name} {self.why}"


def is_hub_hash(value: str) -> bool:
    """Whether `value` is a hash the hub announces for a file: a sha256 (LFS) or a git blob sha1."""
    return bool(SHA256.match(value) or GIT_SHA1.match(value))


def file_hash(path: str | Path, kind: str) -> str:
    """The file's sha256 (`kind="sha256"`) or git blob sha1 (`"git-sha1"`), read a megabyte at a time."""
    path = Path(path)
    digest = hashlib.sha256() if kind == "sha256" else hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def hash_mismatch(path: str | Path, announced: str) -> str | None:
    """Why the file's bytes are not those of the hub hash `announced`, or None when they match."""
    if SHA256.match(announced):
        kind = "sha256"
    elif GIT_SHA1.match(announced):
        kind = "git-sha1"
    else:
        return f"has no hash the hub announces (it announced {announced[:80]!r})"
    found = file_hash(path, kind)
    if found != announced:
        return f"does not match the hash the hub announced ({kind} {announced}, the file has {found})"
    return None


def snapshot_problems(storage: Path, snapshot: Path, announced: Mapping[str, str] | None = None,
                      verified: frozenset[Path] = frozenset(), hashes: bool = True) -> list[SnapshotProblem]:
    """What is wrong with `snapshot`, a folder of the repository's cache folder `storage`.

    Every entry must lie inside `storage` once its links are resolved (a link to a folder is
    refused: huggingface_hub links files only), and every file must hold the bytes of its hash:
    the one in `announced` (the hub's listing: name -> sha256 or git sha1), else its blob's
    name. `verified`: blobs whose bytes were just checked, not read again. `hashes` False: where
    the files lie only, no file read (the check before a training starts, in milliseconds).
    """
    announced = announced or {}
    problems: list[SnapshotProblem] = []
    real_storage = Path(os.path.realpath(storage))
    blobs = real_storage / "blobs"
    if is_link_out(snapshot, storage):
        return [SnapshotProblem(snapshot.name, f"is a link that leads outside {storage}")]
    for folder, dirs, files in os.walk(snapshot, followlinks=False):
        for name in sorted(dirs):
            entry = Path(folder, name)
            if entry.is_symlink():
                problems.append(SnapshotProblem(_rel(entry, snapshot), "is a link to a folder, not a file"))
        dirs[:] = [d for d in dirs if not Path(folder, d).is_symlink()]
        for name in sorted(files):
            entry = Path(folder, name)
            rel = _rel(entry, snapshot)
            real = Path(os.path.realpath(entry))
            if is_link_out(entry, storage):
                where = "nothing" if not os.path.exists(real) else str(real)
                problems.append(SnapshotProblem(rel, f"links outside the cache folder {storage}, to {where}"))
                continue
            if not real.is_file():
                problems.append(SnapshotProblem(rel, "is not a file"))
                continue
            expected = announced.get(rel) or (real.name if real.parent == blobs else "")
            if real.parent == blobs and expected and real.name != expected:
                problems.append(SnapshotProblem(rel, f"is the blob {real.name}, the hub announced {expected}"))
                continue
            if not hashes or not expected or real in verified:
                continue  # a file copied in place (no links on this system) that the hub did not list now
            try:
                why = hash_mismatch(real, expected)
            except OSError as exc:
                why = f"cannot be read ({exc.strerror or exc})"
            if why is not None:
                problems.append(SnapshotProblem(rel, why))
    return problems


def _rel(path: Path, snapshot: Path) -> str:
    return path.relative_to(snapshot).as_posix()
