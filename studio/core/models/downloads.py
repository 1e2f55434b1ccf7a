"""Downloading a base model from the Hugging Face hub: only the files training needs, resumable, verified.

huggingface_hub comes with the training packages; it is imported inside `download_model`,
which runs in its own process (`studio-train download`, started by the GUI too), so the
core and the window never load it. Files land in the hub's cache, where the trainer finds
them with no network. An interrupted download resumes from the bytes already on disk.

The endpoint is asked once per file: its answer names the blob (the hash it announces) and
the commit, both checked, and the studio links the snapshot itself. huggingface_hub's own
download would ask again and trust the second answer. At the end every file of the snapshot
must lie inside the cache and hold the bytes of its hash (`snapshot_check`).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.core.app_words import command_or_action
from studio.core.containment import OutsideFolderError, contained_path, name_parts
from studio.core.files import atomic_write_text, replace
from studio.core.models.hub_ids import not_a_hub_id
from studio.core.models.hub_token import token_may_go_to
from studio.core.models.known import KnownModel, find_known
from studio.core.models.snapshot_check import COMMIT, hash_mismatch, is_hub_hash, snapshot_problems
from studio.core.user_dirs import hub_cache_dir

# What a training download of a repository the studio does not know fetches: configs,
# tokenizers and full-precision .safetensors weights; never the other formats or variants.
GENERIC_KEEP = ("*.json", "*.txt", "*.model", "*.safetensors")
GENERIC_SKIP = ("*.fp16.*", "*.ema.*", "*non_ema*", "safety_checker/*", "*.onnx*", "*openvino*", "*.bin",
                "*.ckpt", "*.msgpack", "*.h5", "*.pb", "*.md")
# A write that failed because the disk (or the person's quota on it) is full.
_DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
# How a refused token's error begins: the window asks for a new token with these words.
TOKEN_REFUSED = "The Hugging Face hub refused the token"


class DownloadError(RuntimeError):
    """A download that cannot go on; the message says what, which files, and what to do."""

    def __init__(self, message: str, gated: bool = False) -> None:
        super().__init__(message)
        self.gated = gated  # a token of an account that accepted the licence would let it through


@dataclass(frozen=True)
class RemoteFile:
    name: str  # repository-relative, with /
    size: int
    sha256: str | None  # the hub gives it for files kept in LFS (the weights)
    git_sha1: str | None = None  # git's blob hash, the hub's ETag of a small file kept in git

    @property
    def announced(self) -> str | None:
        """The hash the hub's listing announces for the file's bytes (the ETag its download must carry)."""
        return self.sha256 or self.git_sha1


@dataclass
class DownloadProgress:
    """Where a download stands; handed to the progress callback several times a second."""

    repo_id: str
    file: str = ""
    files_done: int = 0
    files_total: int = 0
    done_bytes: int = 0
    total_bytes: int = 0
    rate_bps: float = 0.0  # bytes per second received lately
    phase: str = "downloading"  # listing | downloading | verifying | done
    _window: list[tuple[float, int]] = field(default_factory=list, repr=False)

    @property
    def eta_s(self) -> float | None:
        if self.rate_bps <= 0:
            return None
        return max(0.0, (self.total_bytes - self.done_bytes) / self.rate_bps)

    def received(self, count: int, now: float) -> None:
        self.done_bytes += count
        self._window.append((now, count))
        while len(self._window) > 2 and now - self._window[0][0] > 5.0:
            self._window.pop(0)
        span = now - self._window[0][0]
        if span > 0.05:
            self.rate_bps = sum(n for _t, n in self._window[1:]) / span

    def as_dict(self) -> dict[str, Any]:
        return {"repo_id": self.repo_id, "file": self.file, "files_done": self.files_done,
                "files_total": self.files_total, "done_bytes": self.done_bytes, "total_bytes": self.total_bytes,
                "rate_bps": round(self.rate_bps, 1), "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
                "phase": self.phase}


def wanted_files(repo_files: list[RemoteFile], known: KnownModel | None, with_t5: bool) -> list[RemoteFile]:
    """The files of the repository training needs: the known model's list, else configs and .safetensors."""
    if known is not None:
        return [f for f in repo_files if known.selects(f.name, with_t5)]
    return [f for f in repo_files
            if any(fnmatch.fnmatch(f.name, p) for p in GENERIC_KEEP)
            and not any(fnmatch.fnmatch(f.name, p) for p in GENERIC_SKIP)]


def _bar_class(progress: DownloadProgress, report: Callable[[DownloadProgress], None]) -> type:
    """A progress-bar class huggingface_hub fills in as bytes arrive (it makes one per file)."""

    class Bar:
        def __init__(self, *_args: Any, initial: int = 0, **_kwargs: Any) -> None:
            self._last = 0.0
            progress.done_bytes += initial  # the part an earlier download left: resumed, not fetched again

        def update(self, count: float = 1) -> None:
            now = time.monotonic()
            progress.received(int(count), now)
            if now - self._last >= 0.2:
                self._last = now
                report(progress)

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *_exc: object) -> None:
            return None

        def close(self) -> None:
            return None

    return Bar


def verify(path: Path, expected: RemoteFile, etag: str = "") -> str | None:
    """Why the downloaded file is not the one the hub lists, or None when its size and hash match (the
    listing's sha256 or git sha1, else the `etag` its download carried)."""
    size = path.stat().st_size
    if size != expected.size:
        return f"{expected.name} has {size} bytes, the hub lists {expected.size}"
    announced = expected.announced or etag
    why = hash_mismatch(path, announced) if announced else "comes with no hash from the hub"
    return f"{expected.name} {why}" if why else None


def _hostile(what: str) -> str:
    """The end of an error about an answer the Hugging Face hub would not give."""
    from huggingface_hub import constants

    return (f"{what}; if it fails the same way, the server is not answering as the Hugging Face hub does: check "
            f"HF_ENDPOINT (now {constants.ENDPOINT}) and the network's proxy.")


def download_model(
    repo_id: str,
    report: Callable[[DownloadProgress], None] = lambda _p: None,
    token: str | None = None,
    with_t5: bool = False,
    revision: str | None = None,
    cache_dir: Path | None = None,
    keep: tuple[str, ...] | None = None,
) -> Path:
    """Fetch the files training needs into the hub cache; returns the snapshot folder.

    `keep`: the file patterns to fetch instead (a captioning model's files), whatever the repository is.

    Files already complete are not fetched again; a file cut short resumes where it ended.
    Every new file is checked against the size and hash the hub announces, and at the end every file of the
    snapshot against where it lies and its hash (`snapshot_check`). Raises DownloadError.
    """
    os.environ["HF_HUB_OFFLINE"] = "0"  # asked for explicitly: this process goes online
    from huggingface_hub import constants, errors
    from huggingface_hub.hf_api import HfApi

    constants.HF_HUB_OFFLINE = False
    cache = cache_dir or hub_cache_dir()
    progress = DownloadProgress(repo_id, phase="listing")
    report(progress)
    files, listed_commit = _list_files(HfApi(), repo_id, revision, token, with_t5, errors, keep)
    if not files and keep is not None:
        raise DownloadError(f"{repo_id} has none of the files this model needs ({', '.join(keep)}): the "
                            "repository may have moved; choose its folder on this machine instead.")
    if not files:
        raise DownloadError(f"{repo_id} has none of the files training needs (a diffusers model_index.json, "
                            "configs and .safetensors weights): choose a diffusers model repository.")
    progress.files_total, progress.total_bytes = len(files), sum(f.size for f in files)
    progress.done_bytes, progress.phase = 0, "downloading"
    bar = _bar_class(progress, report)
    storage = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = storage
    verified: set[Path] = set()
    for index, remote in enumerate(files):
        progress.file = remote.name
        report(progress)
        before = progress.done_bytes
        try:
            snapshot = _fetch(repo_id, remote, revision, token, storage, listed_commit, bar, progress, report,
                              verified)
        except errors.GatedRepoError:
            raise _gated(repo_id, token) from None
        except _network_errors(errors) as exc:
            raise _disk_full(repo_id, storage, files[index:], exc) or _token_refused(repo_id, token, exc) \
                or _network(repo_id, files[index:], exc) from None
        progress.done_bytes = before + remote.size  # a file found complete in the cache counts too
        progress.files_done += 1
        progress.phase = "downloading"
    progress.phase = "verifying"
    report(progress)
    announced = {f.name: f.announced for f in files if f.announced}
    problems = snapshot_problems(storage, snapshot, announced, frozenset(verified))
    if problems:
        listed = "; ".join(str(p) for p in problems[:3]) + (f" and {len(problems) - 3} more" if len(problems) > 3
                                                             else "")
        raise DownloadError(_hostile(f"{repo_id}: the downloaded snapshot {snapshot} cannot be trusted: {listed}. "
                                     f"Nothing was trained from it: delete the cache folder {storage} and run the "
                                     "download again"))
    progress.phase = "done"
    report(progress)
    return snapshot


def _fetch(repo_id: str, remote: RemoteFile, revision: str | None, token: str | None, storage: Path,
           listed_commit: str, bar: type, progress: DownloadProgress, report: Callable[[DownloadProgress], None],
           verified: set[Path]) -> Path:
    """One file into the cache: its blob fetched into a part file that survives an interruption, checked
    against the hash the hub announced, then linked into the snapshot (the trainer's offline load reads that).
    Returns the snapshot folder."""
    from huggingface_hub import constants, get_hf_file_metadata, get_token, hf_hub_url
    from huggingface_hub.utils import WeakFileLock

    meta = get_hf_file_metadata(hf_hub_url(repo_id, remote.name, revision=revision), token=token)
    etag = str(meta.etag or "")
    blob = _blob_path(storage / "blobs", etag, repo_id, remote.name)
    if not is_hub_hash(etag) or (remote.announced and etag != remote.announced):
        listed = f", its file list announced {remote.announced}" if remote.announced else ""
        raise DownloadError(_hostile(f"{repo_id}: the hub's answer for {remote.name} names the blob {etag[:80]!r}"
                                     f"{listed}; nothing was downloaded for it. Run the download again"))
    commit = str(meta.commit_hash or listed_commit)
    if not COMMIT.match(commit):
        raise DownloadError(_hostile(f"{repo_id}: the hub's answer for {remote.name} names the commit "
                                     f"{commit[:80]!r}, not a commit hash; nothing was downloaded for it. Run the "
                                     "download again"))
    # The token goes to the hub, never to a host its answer redirects to (a mirror's redirect, a stand-in hub).
    location = str(meta.location)
    known_token = token if token is not None else get_token()  # HF_TOKEN and huggingface_hub's own login count
    sent_token: str | bool = known_token if known_token and token_may_go_to(location, constants.ENDPOINT) else False
    # Another download of the same file (a second window, huggingface_hub's own) holds this lock while it writes
    # the part file; this one waits for it and then finds the blob whole, instead of appending to the same part.
    lock = storage.parent / ".locks" / storage.name / f"{etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock):
        if not blob.exists():
            _fetch_blob(repo_id, remote, blob, (etag, location, meta.size), sent_token, bar, progress, report)
            verified.add(Path(os.path.realpath(blob)))
    return _link(storage, commit, remote.name, blob, revision or "main", repo_id)


def _fetch_blob(repo_id: str, remote: RemoteFile, blob: Path, answer: tuple[str, str, int | None],
                sent_token: str | bool, bar: type, progress: DownloadProgress,
                report: Callable[[DownloadProgress], None]) -> None:
    """The blob's bytes into its part file (resumed from what an earlier download left), checked, then renamed.
    `answer`: the hub's ETag, location and size for the file."""
    etag, location, size = answer
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    blob.parent.mkdir(parents=True, exist_ok=True)
    part = blob.with_name(blob.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if have > remote.size:
        part.unlink()
        have = 0
    try:
        with open(part, "ab") as handle:
            http_get(location, handle, resume_size=have, headers=build_hf_headers(token=sent_token),
                     expected_size=size, displayed_filename=remote.name, tqdm_class=bar)
    except OSError as exc:
        if exc.errno in _DISK_FULL:
            part.unlink(missing_ok=True)  # a full disk breaks other programs too: give its space back
        raise
    progress.phase = "verifying"
    report(progress)
    problem = verify(part, remote, etag)
    if problem is not None:
        part.unlink(missing_ok=True)
        raise DownloadError(_hostile(f"{repo_id}: {problem}; the part downloaded was removed. Run the "
                                     "download again"))
    replace(part, blob)  # on Windows, tried again while the antivirus scans the file just written


def _link(storage: Path, commit: str, name: str, blob: Path, revision: str, repo_id: str) -> Path:
    """Link `blob` into the snapshot of `commit` as `name` (as huggingface_hub lays out its cache: a relative
    link, or a copy where this system makes no links) and record `revision`'s commit; returns the snapshot."""
    source = f"the snapshot of {repo_id}"
    try:
        snapshot = contained_path(storage / "snapshots", commit, source)
        parts = name_parts(name, snapshot, source)
        folder = contained_path(snapshot, "/".join(parts[:-1]), source) if len(parts) > 1 else snapshot
        folder.mkdir(parents=True, exist_ok=True)
        pointer = folder / parts[-1]
        if pointer.is_symlink() or pointer.is_file():
            if os.path.realpath(pointer) == os.path.realpath(blob):
                return snapshot
            pointer.unlink()  # an earlier download's link or copy: the blob checked now replaces it
        try:
            os.symlink(os.path.relpath(blob, folder), pointer)
        except OSError:  # pragma: no cover - Windows without developer mode makes no links
            shutil.copyfile(blob, pointer)
        if revision != commit:
            ref = contained_path(storage / "refs", revision, "the revision asked for")
            ref.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(ref, commit)
    except OutsideFolderError as exc:
        raise DownloadError(_hostile(f"{exc}. Delete the cache folder {storage} and run the download again")) \
            from None
    return snapshot


def _blob_path(blobs: Path, etag: str, repo_id: str, name: str) -> Path:
    """The cache file of a blob named by the server's ETag: one plain name inside `blobs`, or a DownloadError."""
    source = f"the hub's ETag for {repo_id}/{name}"
    try:
        if len(name_parts(etag, blobs, source)) != 1:
            raise OutsideFolderError(etag, blobs, "an ETag names one file, not a folder", source)
        return contained_path(blobs, etag, source)
    except OutsideFolderError as exc:
        raise DownloadError(f"{exc}. The server is not answering as the Hugging Face hub does (check HF_ENDPOINT "
                            "and the network's proxy).") from None


def _list_files(api: Any, repo_id: str, revision: str | None, token: str | None, with_t5: bool,
                errors: Any, keep: tuple[str, ...] | None = None) -> tuple[list[RemoteFile], str]:
    """The files to fetch, and the commit the listing is of."""
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True, token=token)
    except errors.HFValidationError:  # no request was made
        raise DownloadError(not_a_hub_id(repo_id)) from None
    except errors.GatedRepoError:
        raise _gated(repo_id, token) from None
    except errors.RepositoryNotFoundError:
        raise DownloadError(f"{repo_id} is not on the hub (or it is private): check the id, or store a token "
                            "of an account that may read it.") from None
    except _network_errors(errors) as exc:
        known = find_known(repo_id)
        raise _token_refused(repo_id, token, exc) or _network(repo_id, [RemoteFile(p, 0, None) for p in known.wanted(with_t5)] if known else [], exc) \
            from None
    listed = [RemoteFile(s.rfilename, int(s.size or 0), (s.lfs or {}).get("sha256") if s.lfs else None,
                         None if s.lfs else getattr(s, "blob_id", None))
              for s in info.siblings or []]
    snapshot = Path("snapshot")
    for remote in listed:
        try:
            contained_path(snapshot, remote.name, f"the hub's file list of {repo_id}")
        except OutsideFolderError as exc:
            raise DownloadError(f"{exc}. The server is not answering as the Hugging Face hub does (check "
                                "HF_ENDPOINT and the network's proxy).") from None
    commit = str(getattr(info, "sha", "") or "")
    if keep is not None:
        return [f for f in listed if any(fnmatch.fnmatch(f.name, pattern) for pattern in keep)], commit
    return wanted_files(listed, find_known(repo_id), with_t5), commit


def _network_errors(errors: Any) -> tuple[type[Exception], ...]:
    """What a hub call raises when the network or the server fails (its HTTP client's errors included)."""
    found: list[type[Exception]] = [errors.HfHubHTTPError, errors.LocalEntryNotFoundError, OSError]
    for client in ("httpx2", "httpx", "requests"):
        try:
            module = __import__(client)
        except ImportError:
            continue
        for name in ("TransportError", "HTTPError", "RequestException"):
            error = getattr(module, name, None)
            if isinstance(error, type) and issubclass(error, Exception):
                found.append(error)
    return tuple(found)


def _gated(repo_id: str, token: str | None) -> DownloadError:
    why = "the stored token may not read it" if token else "it needs a Hugging Face token"
    return DownloadError(f"{repo_id} is gated ({why}): accept its licence at https://huggingface.co/{repo_id} "
                         "while signed in, then store a token of that account"
                         + command_or_action(" (`studio-train download --set-token`)", ": the download asks for it")
                         + ".", gated=True)


def _disk_full(repo_id: str, storage: Path, left: list[RemoteFile], exc: BaseException) -> DownloadError | None:
    """The disk of the cache filled while writing a file (its part is removed): named with the space the rest of
    the download needs; None for any other failure."""
    if not isinstance(exc, OSError) or exc.errno not in _DISK_FULL:
        return None
    try:
        free = f"{human_bytes(shutil.disk_usage(storage).free)} free"
    except OSError:
        free = "no space left"
    return DownloadError(f"{repo_id}: the disk holding the model "
                         f"cache {storage} is full ({free}; the rest of the download needs "
                         f"{human_bytes(sum(f.size for f in left))}). The file being written was removed, the "
                         "finished ones are kept: free space on that disk (or set HF_HUB_CACHE to a folder on a "
                         "larger one), then run the download again.")


def _token_refused(repo_id: str, token: str | None, exc: BaseException) -> DownloadError | None:
    """The hub's 401 for a token it no longer takes (expired, revoked): it refuses every model with it, public
    ones too, so the token is named with how to replace it; None for any other failure."""
    if getattr(getattr(exc, "response", None), "status_code", None) != 401:
        return None
    if token is not None:
        where = "kept in the system keyring"
        fix = ("and store it" + command_or_action(" (`studio-train download --set-token`), or remove the kept one "
                                                  "(`studio-train download --forget-token`)", " when asked"))
    elif os.environ.get("HF_TOKEN"):
        where, fix = "in HF_TOKEN", "and put it in HF_TOKEN, or unset HF_TOKEN to download public models without a token"
    else:
        where, fix = "of the Hugging Face login on this machine", "and log in again (`hf auth login`)"
    return DownloadError(f"{TOKEN_REFUSED} {where} for {repo_id} (401: invalid "
                         f"credentials): it has expired or was revoked. Make a new one at "
                         f"https://huggingface.co/settings/tokens {fix}.", gated=True)


def _network(repo_id: str, missing: list[RemoteFile], exc: BaseException) -> DownloadError:
    names = ", ".join(f.name for f in missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
    lacking = f"; still missing: {names}" if names else ""
    return DownloadError(f"Cannot reach the Hugging Face hub for {repo_id} ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no answer'}){lacking}. Check the network "
                         "and run the download again: finished files are kept and a cut file resumes.")


def human_bytes(count: float) -> str:
    """`512 B`, `3.4 MB`, `4.3 GB` (powers of 1000, as the hub and disks count)."""
    for unit in ("B", "KB", "MB"):
        if abs(count) < 1000:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} GB"


def progress_text(progress: DownloadProgress) -> str:
    """`unet/… 1.2 GB / 4.3 GB  45.0 MB/s  ETA 1:08  (file 3 of 10)`."""
    if progress.phase == "listing":
        return f"{progress.repo_id}: listing files…"
    eta = progress.eta_s
    left = "ETA --:--" if eta is None else f"ETA {int(eta // 60)}:{int(eta % 60):02d}"
    verb = "verifying " if progress.phase == "verifying" else ""
    current = min(progress.files_done + 1, progress.files_total)
    return (f"{verb}{progress.file}  {human_bytes(progress.done_bytes)} / {human_bytes(progress.total_bytes)}  "
            f"{human_bytes(progress.rate_bps)}/s  {left}  (file {current} of {progress.files_total})")
