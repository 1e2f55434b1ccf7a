"""The base models the studio can download (resources/known_models.toml), and each family's default."""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from studio.core.resources import resource_path

KNOWN_MODELS_FILE = "known_models.toml"


class KnownModelsError(RuntimeError):
    """The shipped list of models is damaged (a broken install)."""


@dataclass(frozen=True)
class KnownModel:
    id: str  # the hub repository, org/name
    title: str
    family: str
    size_gb: float  # what a download of `files` weighs, roughly
    gated: bool
    license: str
    files: tuple[str, ...]
    t5_files: tuple[str, ...] = ()
    default: bool = False

    def wanted(self, with_t5: bool = False) -> tuple[str, ...]:
        """The file patterns a training download fetches."""
        return self.files + (self.t5_files if with_t5 else ())

    def selects(self, filename: str, with_t5: bool = False) -> bool:
        """Whether `filename` (repository-relative, with /) is one training needs."""
        return any(_match(filename, pattern) for pattern in self.wanted(with_t5))


def _match(filename: str, pattern: str) -> bool:
    # `*` stays inside one folder: compare folder by folder.
    names, parts = filename.split("/"), pattern.split("/")
    return len(names) == len(parts) and all(fnmatch.fnmatchcase(n, p) for n, p in zip(names, parts, strict=True))


@cache
def _load(path: Path) -> tuple[KnownModel, ...]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return tuple(
            KnownModel(id=row["id"], title=row["title"], family=row["family"], size_gb=float(row["size_gb"]),
                       gated=bool(row.get("gated", False)), license=str(row.get("license", "")),
                       files=tuple(row["files"]), t5_files=tuple(row.get("t5_files", ())),
                       default=bool(row.get("default", False)))
            for row in data["model"]
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise KnownModelsError(f"{path} cannot be read ({exc}); reinstall the studio") from None


def known_models() -> tuple[KnownModel, ...]:
    return _load(resource_path(KNOWN_MODELS_FILE))


def find_known(model_id: str) -> KnownModel | None:
    return next((m for m in known_models() if m.id.lower() == model_id.strip().lower()), None)


def known_gated(model_id: str) -> bool:
    """Whether the list names `model_id` as gated (a token of an account that accepted its licence reads it);
    False for a model it does not know, or when the list cannot be read."""
    try:
        known = find_known(model_id)
    except KnownModelsError:
        return False
    return known is not None and known.gated


def default_base(family: str) -> str:
    """The hub id a new project of `family` starts from."""
    for model in known_models():
        if model.family == family and model.default:
            return model.id
    raise KnownModelsError(f"{resource_path(KNOWN_MODELS_FILE)} names no default model for the family {family}")
