"""The base models already on this machine, found where people keep them.

A1111 and Forge keep checkpoints in `models/Stable-diffusion`, ComfyUI in
`models/checkpoints` and `models/diffusers`, Stability Matrix in its shared
`Models/StableDiffusion`, huggingface_hub in its cache; a person can add folders of their
own. Each file's family and kind come from its header (a few hundred KB of a multi-GB
file), so hundreds of checkpoints are listed in about a second.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from studio.core.files import atomic_write_text
from studio.core.models.files import SINGLE_FILE_SUFFIXES, ModelFileError, detect_model
from studio.core.models.hub_cache import cached_repos
from studio.core.user_dirs import cache_dir, config_dir, hub_cache_dir

LIBRARY_FILE = "model_folders.json"
# What each file was found to be, by path, size and modification time: a second scan reads no header.
SCAN_CACHE_FILE = "model_library.json"
SCAN_CACHE_VERSION = 1
ENV_FOLDERS = "STUDIO_MODEL_FOLDERS"  # extra folders (os.pathsep between them), for portable installs and tests
MAX_DEPTH = 4  # folders below a place that are searched (people sort checkpoints into a few levels)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".ckpt", ".pt")


@dataclass(frozen=True)
class ModelPlace:
    label: str  # "ComfyUI checkpoints", "Added by you", …
    folder: Path


@dataclass(frozen=True)
class LibraryModel:
    path: Path
    place: str  # the label of the place it was found in
    size_bytes: int
    family: str | None
    label: str  # what it is: "SDXL base checkpoint", "SD 1.x/2.x model", …
    problem: str | None = None  # why the studio cannot train from it, or why it could not be read
    hub_id: str | None = None  # for a model in the Hugging Face cache: the id to put in model.base

    @property
    def trainable(self) -> bool:
        return self.family is not None and self.problem is None

    @property
    def base(self) -> str:
        """What model.base should say to train from it."""
        return self.hub_id or str(self.path)

    def as_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "place": self.place, "size_bytes": self.size_bytes, "family": self.family,
                "label": self.label, "problem": self.problem, "hub_id": self.hub_id, "trainable": self.trainable,
                "base": self.base}


def _app_roots() -> list[tuple[str, Path]]:
    """Where the apps people train from usually live."""
    home = Path.home()
    roots = [(name, home / folder) for name, folder in (
        ("A1111", "stable-diffusion-webui"), ("Forge", "stable-diffusion-webui-forge"), ("Forge", "webui_forge"),
        ("ComfyUI", "ComfyUI"), ("ComfyUI", "comfy/ComfyUI"), ("Stability Matrix", "StabilityMatrix"))]
    if sys.platform == "win32" and os.environ.get("APPDATA"):
        roots.append(("Stability Matrix", Path(os.environ["APPDATA"]) / "StabilityMatrix"))
    elif sys.platform == "darwin":
        roots.append(("Stability Matrix", home / "Library" / "Application Support" / "StabilityMatrix"))
    else:
        roots.append(("Stability Matrix", home / ".local" / "share" / "StabilityMatrix"))
    return roots


_APP_FOLDERS = {
    "A1111": ("models/Stable-diffusion",), "Forge": ("models/Stable-diffusion",),
    "ComfyUI": ("models/checkpoints", "models/diffusers"), "Stability Matrix": ("Models/StableDiffusion",),
}


def added_folders() -> list[Path]:
    """The folders a person added to the library ($STUDIO_MODEL_FOLDERS and the saved list), each once."""
    folders = [Path(p) for p in os.environ.get(ENV_FOLDERS, "").split(os.pathsep) if p]
    return list(dict.fromkeys(folders + saved_folders()))


def saved_folders() -> list[Path]:
    """The saved list alone: what adding or removing a folder changes. $STUDIO_MODEL_FOLDERS (a portable
    install's launcher, a test) is never written into it, so it is not searched once the variable is gone."""
    try:
        saved = json.loads((config_dir() / LIBRARY_FILE).read_text(encoding="utf-8")).get("folders", [])
    except (OSError, ValueError, AttributeError):
        saved = []
    return [Path(p) for p in saved if isinstance(p, str)]


def save_added_folders(folders: list[Path]) -> None:
    unique = list(dict.fromkeys(str(Path(f).expanduser().absolute()) for f in folders))
    path = config_dir() / LIBRARY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"folders": unique}, indent=2) + "\n")


def model_places() -> list[ModelPlace]:
    """Every place searched: the apps' model folders that exist, the hub cache, the folders added."""
    places = [ModelPlace(f"{app} {sub.rsplit('/', 1)[-1]}", root / sub)
              for app, root in _app_roots() for sub in _APP_FOLDERS[app] if (root / sub).is_dir()]
    places.append(ModelPlace("Hugging Face cache", hub_cache_dir()))
    places += [ModelPlace("Added by you", folder) for folder in added_folders()]
    return places


def _candidates(folder: Path, depth: int = 0) -> Iterator[Path]:
    """Checkpoint files and diffusers folders below `folder` (a diffusers folder is not entered)."""
    try:
        with os.scandir(folder) as it:
            items = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name.lower())
    except OSError:
        return
    for item in items:
        try:
            if item.is_file() and item.name.lower().endswith(SINGLE_FILE_SUFFIXES):
                yield Path(item.path)
            elif item.is_dir() and depth < MAX_DEPTH:
                path = Path(item.path)
                if (path / "model_index.json").is_file():
                    yield path
                else:
                    yield from _candidates(path, depth + 1)
        except OSError:
            continue


def _folder_size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            if name.endswith(WEIGHT_SUFFIXES):
                try:
                    total += os.stat(os.path.join(root, name)).st_size  # follows the hub cache's links
                except OSError:
                    continue
    return total


def _stamp(path: Path) -> tuple[int, int]:
    """(size, mtime_ns) that change when the file (or a diffusers folder's model_index.json) changes."""
    st = (path / "model_index.json").stat() if path.is_dir() else path.stat()
    return st.st_size, st.st_mtime_ns


def describe(path: Path, place: str, hub_id: str | None = None) -> LibraryModel:
    """One model of the library: read from its header or JSON, never its weights."""
    size = _folder_size(path) if path.is_dir() else path.stat().st_size
    try:
        info = detect_model(path)
    except ModelFileError as exc:
        return LibraryModel(path, place, size, None, "unreadable model", str(exc), hub_id)
    return LibraryModel(path, place, size, info.family, info.label, info.refused, hub_id)


class _ScanCache:
    """The scan's memory of files already read, kept in the studio's cache folder."""

    def __init__(self) -> None:
        self.path = cache_dir() / SCAN_CACHE_FILE
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.rows: dict[str, dict[str, object]] = data["models"] if data.get("version") == SCAN_CACHE_VERSION \
                else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.rows = {}
        self.used: dict[str, dict[str, object]] = {}

    def describe(self, path: Path, place: str, hub_id: str | None) -> LibraryModel:
        key, stamp = str(path), list(_stamp(path))
        row = self.rows.get(key)
        if row is not None and row.get("stamp") == stamp:
            model = LibraryModel(path, place, int(str(row["size"])), _str(row.get("family")), str(row["label"]),
                                 _str(row.get("problem")), hub_id)
        else:
            model = describe(path, place, hub_id)
        self.used[key] = {"stamp": stamp, "size": model.size_bytes, "family": model.family, "label": model.label,
                          "problem": model.problem}
        return model

    def save(self) -> None:
        if self.used == self.rows:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps({"version": SCAN_CACHE_VERSION, "models": self.used}))
        except OSError:
            pass  # a read-only cache folder only costs the next scan its speed


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _hub_candidates(cache: Path) -> list[tuple[Path, str | None]]:
    """A cached diffusers repository is one model (its hub id trains it offline); other repositories
    may hold single checkpoint files."""
    found: list[tuple[Path, str | None]] = []
    for repo_id, snapshot in cached_repos(cache):
        if (snapshot / "model_index.json").is_file():
            found.append((snapshot, repo_id))
        else:
            found += [(path, None) for path in _candidates(snapshot, MAX_DEPTH) if path.is_file()]
    return found


def scan_library(places: list[ModelPlace] | None = None,
                 progress: Callable[[int], None] | None = None) -> list[LibraryModel]:
    """Every checkpoint file and diffusers folder in `places` (default: `model_places()`), each listed once."""
    found: list[LibraryModel] = []
    seen: set[Path] = set()
    hub = hub_cache_dir()
    cache = _ScanCache()
    for place in places if places is not None else model_places():
        candidates = _hub_candidates(hub) if place.folder == hub else \
            [(path, None) for path in _candidates(place.folder)]
        for path, hub_id in candidates:
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            try:
                found.append(cache.describe(path, place.label, hub_id))
            except OSError:
                continue  # it went away while being listed
            if progress is not None:
                progress(len(found))
    cache.save()
    return found
