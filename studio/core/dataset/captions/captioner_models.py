"""The captioning models the studio knows, and where a model's files are found on this machine.

Shared by `studio-train caption` (which loads the model) and the Dataset page (which offers
the choice), so it is plain data here in the core. `find_captioner` is the one place that
turns a name into a folder; a model library can take over the lookup there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from studio.core.app_words import command_or_action
from studio.core.containment import OutsideFolderError, contained_path
from studio.core.user_dirs import data_dir, hub_cache_dir

CaptionerKind = Literal["blip", "florence2", "wd14"]
KINDS: tuple[CaptionerKind, ...] = ("blip", "florence2", "wd14")
KIND_TITLES = {
    "blip": "BLIP (a sentence)",
    "florence2": "Florence-2 (a detailed sentence)",
    "wd14": "WD14 tagger (booru tags)",
}
# Files a folder of each kind must hold (any one of a tuple).
KIND_FILES: dict[str, tuple[tuple[str, ...], ...]] = {
    "blip": (("config.json",), ("model.safetensors", "pytorch_model.bin"), ("preprocessor_config.json", "processor_config.json")),
    "florence2": (("config.json",), ("model.safetensors", "pytorch_model.bin"), ("preprocessor_config.json", "processor_config.json")),
    "wd14": (("model.onnx",), ("selected_tags.csv",)),
}
# What a download of each kind fetches from its hub repository (`studio-train download --captioner`):
# the files the captioner loads, not the repository's other formats (PyTorch .bin, TensorFlow, timm weights).
KIND_DOWNLOADS: dict[str, tuple[str, ...]] = {
    "blip": ("*.json", "*.txt", "model.safetensors"),
    "florence2": ("*.json", "*.txt", "model.safetensors"),
    "wd14": ("model.onnx", "selected_tags.csv"),
}


@dataclass(frozen=True)
class CaptionerModel:
    """A published captioning model: what it is, where it comes from, what it costs."""

    name: str  # what people type: --model blip-base
    kind: CaptionerKind
    repo: str  # its Hugging Face repository
    size_mb: int  # download size, about
    vram_mb: int  # GPU memory at the default batch size in fp16, about
    batch_size: int  # default images per batch on a GPU

    @property
    def title(self) -> str:
        return f"{self.name} — {KIND_TITLES[self.kind]}, {self.size_mb / 1000:.1f} GB"

    @property
    def files(self) -> tuple[tuple[str, ...], ...]:
        return KIND_FILES[self.kind]

    @property
    def download_patterns(self) -> tuple[str, ...]:
        return KIND_DOWNLOADS[self.kind]


KNOWN_CAPTIONERS: tuple[CaptionerModel, ...] = (
    CaptionerModel("blip-base", "blip", "Salesforce/blip-image-captioning-base", 990, 1200, 16),
    CaptionerModel("blip-large", "blip", "Salesforce/blip-image-captioning-large", 1880, 2000, 8),
    CaptionerModel("florence2-base", "florence2", "florence-community/Florence-2-base", 470, 1500, 8),
    CaptionerModel("florence2-large", "florence2", "florence-community/Florence-2-large", 1550, 3000, 4),
    CaptionerModel("wd14-vit-v3", "wd14", "SmilingWolf/wd-vit-tagger-v3", 380, 1000, 16),
    CaptionerModel("wd14-swinv2-v3", "wd14", "SmilingWolf/wd-swinv2-tagger-v3", 470, 1200, 16),
    CaptionerModel("wd14-eva02-large-v3", "wd14", "SmilingWolf/wd-eva02-large-tagger-v3", 1270, 2500, 8),
)


class CaptionerNotFound(LookupError):
    """A captioning model that is neither a folder nor a known, downloaded name; the message says what to do."""


@dataclass(frozen=True)
class CaptionerSource:
    """A captioning model found on disk: its folder and kind (and its known entry, if any)."""

    folder: Path
    kind: CaptionerKind
    known: CaptionerModel | None = None

    @property
    def name(self) -> str:
        return self.known.name if self.known is not None else self.folder.name


def known_captioner(name: str) -> CaptionerModel | None:
    return next((m for m in KNOWN_CAPTIONERS if m.name == name), None)


def captioners_dir() -> Path:
    """Where downloaded captioning models live: one folder per known name."""
    return data_dir() / "models" / "captioners"


def missing_files(folder: Path, kind: CaptionerKind) -> list[str]:
    """The files of `kind` that `folder` lacks, as "a or b" for alternatives."""
    return [" or ".join(choice) for choice in KIND_FILES[kind] if not any((folder / f).is_file() for f in choice)]


def detect_kind(folder: Path) -> CaptionerKind | None:
    """The captioner kind of a model folder from its files: an ONNX tagger or a transformers config."""
    if (folder / "model.onnx").is_file() or (folder / "selected_tags.csv").is_file():
        return "wd14"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_type = str(config.get("model_type", "")) if isinstance(config, dict) else ""
    if model_type == "blip":
        return "blip"
    if model_type.startswith("florence"):
        return "florence2"
    return None


def find_captioner(name_or_path: str, kind: CaptionerKind | None = None) -> CaptionerSource:
    """The captioning model a person named: a folder path, or a known name downloaded to `captioners_dir()`.

    `kind` overrides what the folder's files say. Raises CaptionerNotFound saying what was
    looked for and how to get it.
    """
    path = Path(name_or_path).expanduser()
    known = known_captioner(name_or_path)
    if known is not None and not path.exists():
        path = captioners_dir() / known.name
        cached = hub_cache_snapshot(known.repo)
        if not path.is_dir() and cached is not None:
            path = cached
        elif not path.is_dir():
            raise CaptionerNotFound(
                f"The captioning model {known.name} is not downloaded (looked in {path} and the "
                "Hugging Face cache). "
                + command_or_action(f"Download {known.repo} (about {known.size_mb} MB) with `studio-train download "
                                    f"--captioner {known.name}`, or give the folder of a model you have with --model "
                                    "PATH.", f"Download {known.name} (about {known.size_mb} MB) where the Dataset "
                                    "page offers captioners."))
    elif not path.is_dir():
        names = ", ".join(m.name for m in KNOWN_CAPTIONERS)
        raise CaptionerNotFound(
            f"No captioning model {name_or_path!r}: it is not a folder and not a known model name. "
            f"Give a model folder (BLIP, Florence-2, or a WD14 tagger with model.onnx and selected_tags.csv) "
            f"or one of: {names}.")
    found = kind or (known.kind if known is not None else None) or detect_kind(path)
    if found is None:
        raise CaptionerNotFound(
            f"{path} holds no captioning model the studio can read: it needs a config.json of a BLIP or "
            "Florence-2 model, or model.onnx and selected_tags.csv of a WD14 tagger.")
    missing = missing_files(path, found)
    if missing:
        raise CaptionerNotFound(f"The {KIND_TITLES[found]} model in {path} is incomplete: it lacks "
                                f"{'; '.join(missing)}. Download the model again.")
    return CaptionerSource(path.resolve(), found, known)


def hub_cache_snapshot(repo: str) -> Path | None:
    """The newest downloaded snapshot of `repo` in the Hugging Face cache (as other tools leave it), or None."""
    folder = hub_cache_dir() / ("models--" + repo.replace("/", "--"))
    try:
        revision = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    try:  # the ref was written from a server's answer: it names a folder inside snapshots/ or nothing
        snapshot = contained_path(folder / "snapshots", revision, f"the cached ref of {repo}")
    except OutsideFolderError:
        return None
    return snapshot if snapshot.is_dir() else None


def available_captioners() -> list[str]:
    """Names for a model menu: the known models downloaded to this machine, then other folders there."""
    folder = captioners_dir()
    try:
        present = sorted(p.name for p in folder.iterdir() if p.is_dir())
    except OSError:
        present = []
    known = [m.name for m in KNOWN_CAPTIONERS if m.name in present or hub_cache_snapshot(m.repo) is not None]
    return known + [str(folder / name) for name in present if known_captioner(name) is None]
