"""Copying files to and from a remote machine: only what changed, resumable, rsync or sftp.

Sending compares SHA-256 checksums: the machine hashes its copies of the files that
have the right size (one SSH call, which also makes the folders and removes stale files
from folders the studio owns), and only files whose checksum differs travel. The
dataset's checksums come from the bundle's manifest, so a second send of an unchanged
dataset copies no image. The copying itself is rsync over the same SSH connection when
both sides have it (partial files kept for a resume), else sftp, which every OpenSSH has.
A file coming back is written in a hidden folder beside it and takes its own name only once it is
whole: a pull cut off midway never leaves a half LoRA under the LoRA's name.

Names travel as data, never as commands (see studio/core/quoting.py): rsync reads a
NUL-separated file list, so any name arrives byte for byte; sftp reads a batch of text lines,
so a name it cannot carry (a line break, a control character, bytes that are not UTF-8, a
path over its line length) is refused before anything is copied, naming the file and what to
do. All or nothing, as for a name that would leave its folder: the studio never writes such
names, so one there means someone else wrote in the folder, and a send or pull that looks
complete while a file stayed behind would be worse than one that says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.containment import OutsideFolderError, contained_path
from studio.core.files import replace, sha256_file
from studio.core.quoting import UnsafeNameError, nul_list, or_rsync, sftp_line, shown
from studio.core.remote.ssh import RemoteError, SshClient

Progress = Callable[[str, int, int], None]  # (message, done, total)
COPY_TIMEOUT_S = 6 * 3600
# Where a file coming back is written until it is whole (a hidden folder beside it; rsync's --partial-dir
# and the sftp pull alike): one cut short waits there for the next pull, which continues it.
PARTIAL_DIR = ".studio-partial"
SPARE_BYTES = 64 * 2**20  # left free after a send: the run's first events, logs and samples need room

# Runs there: make the folders, remove files the studio no longer sends, hash same-size files.
_PREPARE = r"""
import hashlib, json, os, sys
job = json.loads(JOB)
root = job["root"]
os.makedirs(root, exist_ok=True)
wanted = job["files"]
for rel in wanted:
    os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
removed = []
for prefix in job["prune"]:
    top = os.path.join(root, prefix)
    for folder, _dirs, names in os.walk(top):
        for name in names:
            rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            if rel not in wanted:
                os.remove(os.path.join(root, rel))
                removed.append(rel)
have = {}
for rel, size in wanted.items():
    path = os.path.join(root, rel)
    try:
        if os.path.getsize(path) != size:
            continue
    except OSError:
        continue
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    have[rel] = digest.hexdigest()
try:
    fs = os.statvfs(root)
    free = fs.f_bavail * fs.f_frsize
except (AttributeError, OSError):
    free = None
print(json.dumps({"have": have, "removed": removed, "free": free}))
"""

# Runs there: every file under a folder with its size (for a pull).
_LIST = r"""
import json, os
job = json.loads(JOB)
root, skip = job["root"], tuple(job["skip"])
found = {}
for folder, dirs, names in os.walk(root):
    dirs.sort()
    for name in names:
        rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
        if not rel.startswith(skip) and rel not in skip:
            try:
                found[rel] = os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
print(json.dumps({"exists": os.path.isdir(root), "files": found}))
"""


@dataclass
class LocalFile:
    """A file here and the path it has under the remote folder (POSIX, relative)."""

    source: Path
    rel: str
    size: int = -1
    sha256: str | None = None  # computed when not known (the manifest knows the dataset's)

    def __post_init__(self) -> None:
        if self.size < 0:
            self.size = self.source.stat().st_size


@dataclass
class TransferReport:
    tool: str
    copied: list[str] = field(default_factory=list)
    unchanged: int = 0
    bytes_copied: int = 0
    removed: list[str] = field(default_factory=list)


def has_local_rsync() -> bool:
    """rsync here, where the studio can use it. Not on Windows: its ports (cwRsync, MSYS2) read `C:\\...` as a
    host named C, and a send's tree of links needs a right few Windows users have; sftp comes with Windows."""
    return os.name != "nt" and shutil.which("rsync") is not None


def _job(code: str, job: Mapping[str, object]) -> str:
    return f"JOB = {json.dumps(json.dumps(job))}\n{code}"


def _last_json(out: str, doing: str) -> dict[str, object]:
    try:
        return dict(json.loads(out.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        raise RemoteError(f"{doing}: the machine's Python printed no result ({out[-200:]!r})") from None


# ------------------------------------------------------------ send
def send_files(client: SshClient, files: Sequence[LocalFile], remote_root: str, use_rsync: bool,
               prune: Sequence[str] = (), progress: Progress | None = None) -> TransferReport:
    """Make `remote_root` hold `files` (only the changed ones travel); files under the `prune`
    prefixes that are not in `files` are removed there. `remote_root` is an absolute path."""
    # A name the copy tool cannot carry is refused before anything changes there.
    if use_rsync:
        _rsync_list(client, [f.rel for f in files])
    else:
        _sftp_put_lines(client, files, remote_root)
    for number, item in enumerate(files, start=1):
        if item.sha256 is None:
            if progress:
                progress(f"checksum {item.rel}", number, len(files))
            item.sha256 = sha256_file(item.source)
    if progress:
        progress("comparing with the copies there", 0, 1)
    job = {"root": remote_root, "files": {f.rel: f.size for f in files}, "prune": list(prune)}
    answer = _last_json(client.python(_job(_PREPARE, job), "comparing files").stdout, "comparing files")
    have = dict(answer["have"])  # type: ignore[call-overload]
    changed = [f for f in files if have.get(f.rel) != f.sha256]
    report = TransferReport("rsync" if use_rsync else "sftp", [f.rel for f in changed], len(files) - len(changed),
                            sum(f.size for f in changed), list(answer["removed"]))  # type: ignore[call-overload]
    free = answer.get("free")
    if changed and isinstance(free, int) and report.bytes_copied + SPARE_BYTES > free:
        raise RemoteError(f"{remote_root} on {client.machine.name} has {free / 1e9:.2f} GB free, and this send "
                          f"needs {report.bytes_copied / 1e9:.2f} GB ({len(changed)} file(s)) plus room for the run: "
                          "free space there (old runs, the hub cache) or rent a larger disk; nothing was copied")
    if changed:
        if progress:
            progress(f"copying {len(changed)} file(s) with {report.tool}", 0, len(changed))
        try:
            if use_rsync:
                _rsync_up(client, changed, remote_root)
            else:
                _sftp_up(client, changed, remote_root)
        except RemoteError as exc:
            # What arrived stays there (rsync keeps a partial file); the next send compares again.
            said = str(exc).rstrip(". ")
            raise RemoteError(f"{said}. The copy to {client.machine.name} was cut off: run it again, only what is "
                              "missing is sent.") from exc
    if progress:
        progress(f"copied {len(changed)} file(s)", len(changed), max(len(changed), 1))
    return report


def rsync_e(client: SshClient) -> str:
    """rsync's -e: the ssh command with this client's options (rsync splits it like a shell)."""
    ssh = shutil.which("ssh") or "ssh"
    return " ".join(shlex.quote(part) for part in [ssh, *client.options()])


def _rsync_up(client: SshClient, files: Sequence[LocalFile], remote_root: str) -> None:
    with tempfile.TemporaryDirectory(prefix="studio-send-") as tmp:
        # One rsync for files from many folders: a tree of links in the remote layout (-L follows them).
        tree = Path(tmp) / "tree"
        for item in files:
            link = tree / item.rel
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(item.source.resolve(), link)
        listing = Path(tmp) / "files.bin"
        listing.write_bytes(_rsync_list(client, [f.rel for f in files]))  # NUL-separated: a name may hold a line break
        argv = ["rsync", "-rLpt", "--partial", "--ignore-times", "--protect-args", "--from0",
                f"--files-from={listing}", "-e", rsync_e(client), f"{tree}/", f"{client.machine.host}:{remote_root}/"]
        client.call(argv, "copying with rsync", COPY_TIMEOUT_S)


def _rsync_list(client: SshClient, rels: Sequence[str]) -> bytes:
    """rsync's file list (`--from0`): any name a file system allows travels; NUL, which none does, is refused."""
    try:
        return nul_list(rels)
    except UnsafeNameError as exc:
        raise RemoteError(f"copying with rsync ({client.machine.name}): {exc}; nothing was copied") from None


def _sftp(client: SshClient, batch: list[str], doing: str) -> None:
    sftp = shutil.which("sftp")
    if sftp is None:
        raise RemoteError("the sftp command is not installed here (it comes with OpenSSH): install the OpenSSH "
                          "client, or rsync on both sides")
    client.call([sftp, "-q", "-b", "-", *client.options(), client.machine.host], doing, COPY_TIMEOUT_S,
                stdin_text="\n".join(batch) + "\n")


def _sftp_lines(client: SshClient, lines: Mapping[str, tuple[str, list[str], str, str]], doing: str,
                todo: str) -> list[str]:
    """Each file's batch line (name -> command, flags, source, destination), or one RemoteError naming every
    file whose line cannot be written; nothing has been copied yet (all or nothing: see the module's docstring)."""
    made, refused = [], []
    for name, (command, flags, source, target) in lines.items():
        try:
            made.append(sftp_line(command, flags, source, target))
        except UnsafeNameError as exc:
            refused.append(f"{shown(name)} {exc.why}" if exc.name.endswith(name) else f"{shown(name)}: {exc}")
    if refused:
        listed = "; ".join(refused[:5]) + (f"; and {len(refused) - 5} more" if len(refused) > 5 else "")
        raise RemoteError(f"{doing} with sftp ({client.machine.name}): {len(refused)} file name(s) cannot be "
                          f"written into sftp's batch: {listed}. {todo}{or_rsync('it carries any name')}; nothing was copied")
    return made


def _sftp_put_lines(client: SshClient, files: Sequence[LocalFile], remote_root: str) -> list[str]:
    lines = {str(f.source): ("put", ["-p"], str(f.source.absolute()), f"{remote_root}/{f.rel}") for f in files}
    return _sftp_lines(client, lines, "sending", "Rename the file here")


def _sftp_up(client: SshClient, files: Sequence[LocalFile], remote_root: str) -> None:
    _sftp(client, _sftp_put_lines(client, files, remote_root), "copying with sftp")


# ------------------------------------------------------------ pull
def remote_files(client: SshClient, remote_root: str, skip: Sequence[str] = ()) -> dict[str, int]:
    """Every file under a remote folder with its size (relative POSIX paths), leaving out `skip` prefixes."""
    job = {"root": remote_root, "skip": list(skip)}
    answer = _last_json(client.python(_job(_LIST, job), "listing files").stdout, "listing files")
    if not answer["exists"]:
        raise RemoteError(f"{remote_root} does not exist on {client.machine.name} (deleted, or another machine?)")
    return dict(answer["files"])  # type: ignore[call-overload]


def pull_folder(client: SshClient, remote_root: str, local_root: Path, use_rsync: bool,
                skip: Sequence[str] = (), progress: Progress | None = None) -> TransferReport:
    """Bring a remote folder here: files missing here or of another size travel; a file cut short by a
    dropped connection continues where it stopped."""
    if progress:
        progress(f"listing {remote_root}", 0, 1)
    # `skip` is honoured here too, whatever the machine's listing says.
    there = {rel: size for rel, size in remote_files(client, remote_root, skip).items() if not skipped(rel, skip)}
    local_root.mkdir(parents=True, exist_ok=True)
    targets = arrival_paths(client, remote_root, list(there), local_root)
    changed = [rel for rel, size in sorted(there.items()) if _local_size(targets[rel]) != size]
    report = TransferReport("rsync" if use_rsync else "sftp", changed, len(there) - len(changed),
                            sum(there[rel] for rel in changed))
    if changed:
        if progress:
            progress(f"bringing back {len(changed)} file(s) with {report.tool}", 0, len(changed))
        if use_rsync:
            _rsync_down(client, changed, remote_root, local_root)
        else:
            _sftp_down(client, {rel: there[rel] for rel in changed}, remote_root, local_root)
    if progress:
        progress(f"brought back {len(changed)} file(s)", len(changed), max(len(changed), 1))
    return report


def fetch_files(client: SshClient, remote_root: str, rels: Sequence[str], local_root: Path, use_rsync: bool) -> None:
    """Bring these files of a remote folder here (e.g. a sample's images as its event arrives)."""
    if not rels:
        return
    targets = arrival_paths(client, remote_root, rels, local_root)
    if use_rsync:
        for rel in rels:
            targets[rel].parent.mkdir(parents=True, exist_ok=True)
        _rsync_down(client, rels, remote_root, local_root)
    else:
        _sftp_down(client, {rel: -1 for rel in rels}, remote_root, local_root)


def uncarried(remote_root: str, rels: Sequence[str], local_root: Path, use_rsync: bool) -> dict[str, str]:
    """The files among `rels` whose names the copy tool cannot carry, each with why (rsync carries any name)."""
    refused = {}
    for rel in [] if use_rsync else rels:
        try:
            sftp_line("get", ["-a", "-p"], f"{remote_root}/{rel}", str(_partial(local_root / rel).absolute()))
        except UnsafeNameError as exc:
            refused[rel] = exc.why
    return refused


def skipped(rel: str, skip: Sequence[str]) -> bool:
    """Whether `rel` is one of the `skip` names or lies under one of its prefixes (`checkpoints/`), read as this
    computer's file system may read it: in any case (macOS, Windows), trailing dots and spaces dropped (Windows)."""
    def folded(name: str) -> str:
        return "/".join(part.casefold().rstrip(". ") for part in name.replace("\\", "/").split("/"))

    name, prefixes = folded(rel), tuple(folded(s) for s in skip)
    return name in prefixes or name.startswith(prefixes)


def arrival_paths(client: SshClient, remote_root: str, rels: Sequence[str], local_root: Path) -> dict[str, Path]:
    """Where each file named by the machine lands here; a name that would leave `local_root` (`..`, absolute,
    through a link) is a RemoteError naming it, before anything is copied. So is a name with a `.` part
    (`a/./b`): rsync reads it as `b`, another file than the one checked, perhaps one the pull leaves out."""
    source = f"{client.machine.name}:{remote_root}"
    try:
        for rel in rels:
            if "." in rel.split("/"):
                raise OutsideFolderError(rel, local_root, "the name holds a '.' folder", source)
        return {rel: contained_path(local_root, rel, source) for rel in rels}
    except OutsideFolderError as exc:
        raise RemoteError(f"{exc}; nothing was brought back (a file name the studio never writes: "
                          "is someone else using that machine?)") from None


def _local_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _partial(target: Path) -> Path:
    """Where sftp writes a file coming back until it is whole (see PARTIAL_DIR)."""
    return target.parent / PARTIAL_DIR / target.name


def _rsync_down(client: SshClient, rels: Sequence[str], remote_root: str, local_root: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="studio-pull-") as tmp:
        listing = Path(tmp) / "files.bin"
        listing.write_bytes(_rsync_list(client, rels))  # NUL-separated: a name there may hold a line break
        # No -r: only the files the listing named (each checked by arrival_paths) travel, never a folder's
        # whole tree; --files-from makes the folders on the way. An absolute destination: a relative one
        # with a ':' before its first '/' would name another host.
        # --partial-dir: a file cut short waits there for the next pull, never under its own name.
        argv = ["rsync", "-pt", f"--partial-dir={PARTIAL_DIR}", "--protect-args", "--from0", f"--files-from={listing}",
                "-e", rsync_e(client), f"{client.machine.host}:{remote_root}/", f"{local_root.absolute()}/"]
        client.call(argv, "bringing files back with rsync", COPY_TIMEOUT_S)


def _sftp_down(client: SshClient, sizes: dict[str, int], remote_root: str, local_root: Path) -> None:
    targets = arrival_paths(client, remote_root, list(sizes), local_root)
    lines, whole = {}, []
    for rel, size in sizes.items():
        # Each file arrives under a hidden name; one a cut-off pull left whole only takes its name.
        have = _local_size(_partial(targets[rel]))
        if size >= 0 and have == size:
            whole.append(rel)
            continue
        resume = ["-a"] if 0 < have < size else []  # continue a file cut short (-1: unknown)
        lines[rel] = ("get", [*resume, "-p"], f"{remote_root}/{rel}", str(_partial(targets[rel]).absolute()))
    batch = _sftp_lines(client, lines, f"bringing files back from {remote_root}",
                        f"Rename or remove them on {client.machine.name} ({client.machine.ssh_command()})")
    for rel in lines:
        _partial(targets[rel]).parent.mkdir(parents=True, exist_ok=True)
    if batch:
        _sftp(client, batch, "bringing files back with sftp")
    for rel in [*lines, *whole]:
        replace(_partial(targets[rel]), targets[rel])
    for folder in {_partial(targets[rel]).parent for rel in sizes}:
        with contextlib.suppress(OSError):  # kept while it holds another file still cut short
            folder.rmdir()
