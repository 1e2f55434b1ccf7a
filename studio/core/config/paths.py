"""Relative paths in a config, made absolute against the config file's folder (hub ids stay)."""

from __future__ import annotations

from pathlib import Path

from studio.core.config.schema import TrainConfig
from studio.core.config.toml_file import load_config


def _resolve(base_dir: Path, value: str | None, hub_ok: bool) -> str | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    if p.is_absolute():
        return str(p)
    candidate = (base_dir / p)
    if hub_ok and not candidate.exists() and _looks_like_hub_id(value):
        return value
    return str(candidate.resolve())


def _looks_like_hub_id(value: str) -> bool:
    parts = value.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not value.startswith((".", "~"))
        and not value.endswith((".safetensors", ".ckpt"))
    )


def resolve_paths(config: TrainConfig, base_dir: str | Path) -> TrainConfig:
    """A copy whose relative paths are made absolute against `base_dir` (the config's folder).

    Hub ids (`org/name` that is not a local path) stay as they are.
    """
    base = Path(base_dir)
    out = config.model_copy(deep=True)
    out.model.base = _resolve(base, out.model.base, hub_ok=True) or out.model.base
    out.model.vae = _resolve(base, out.model.vae, hub_ok=True)
    for concept in out.dataset.concepts:
        concept.path = _resolve(base, concept.path, hub_ok=False) or concept.path
        concept.class_path = _resolve(base, concept.class_path, hub_ok=False)
    out.output.dir = _resolve(base, out.output.dir, hub_ok=False) or out.output.dir
    return out


def load_resolved(path: str | Path) -> TrainConfig:
    """Load a config file and resolve its paths against its folder."""
    path = Path(path)
    return resolve_paths(load_config(path), path.resolve().parent)


