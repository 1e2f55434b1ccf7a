"""The Hugging Face cache on this machine, read without huggingface_hub (the core runs without it).

A downloaded repository lives in `<cache>/models--org--name/`: `refs/<branch>` holds the
commit, `snapshots/<commit>/` the files. This is what `from_pretrained(..., local_files_only=True)`
reads, so a model found complete here trains with no network.
"""

from __future__ import annotations

import json
from pathlib import Path

from studio.core.containment import OutsideFolderError, contained_path
from studio.core.user_dirs import hub_cache_dir

# Components a pipeline's model_index.json names that training does not load.
UNUSED_COMPONENTS = frozenset({"safety_checker", "image_encoder"})


def repo_folder(repo_id: str, cache_dir: Path | None = None) -> Path:
    return (cache_dir or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))


def cached_snapshot(repo_id: str, revision: str | None = None, cache_dir: Path | None = None) -> Path | None:
    """The snapshot folder of `repo_id` at `revision` (default: main) in the cache, or None."""
    folder = repo_folder(repo_id, cache_dir)
    revision = revision or "main"
    ref = folder / "refs" / revision
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else revision
    except OSError:
        return None
    try:  # the ref was written from a server's answer: it names a folder inside snapshots/ or nothing
        snapshot = contained_path(folder / "snapshots", commit, f"the cached ref {ref}")
    except OutsideFolderError:
        return None
    return snapshot if snapshot.is_dir() else None


def missing_components(snapshot: Path) -> list[str]:
    """What a cached diffusers snapshot lacks for training: model_index.json, or a component's folder."""
    index = snapshot / "model_index.json"
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ["model_index.json"]
    missing = []
    for name, value in data.items() if isinstance(data, dict) else ():
        if name.startswith("_") or name in UNUSED_COMPONENTS:
            continue
        if isinstance(value, list) and value and value[0] is not None and not (snapshot / name).is_dir():
            missing.append(f"{name}/")
    return missing


def cached_repos(cache_dir: Path | None = None) -> list[tuple[str, Path]]:
    """(repo id, snapshot folder) of every model repository in the cache, newest snapshot of main first."""
    root = cache_dir or hub_cache_dir()
    found = []
    try:
        folders = sorted(p for p in root.iterdir() if p.name.startswith("models--"))
    except OSError:
        return []
    for folder in folders:
        repo_id = folder.name[len("models--"):].replace("--", "/", 1)
        snapshot = cached_snapshot(repo_id, None, root)
        if snapshot is None:
            snapshots = sorted((folder / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime, reverse=True) \
                if (folder / "snapshots").is_dir() else []
            snapshot = snapshots[0] if snapshots else None
        if snapshot is not None:
            found.append((repo_id, snapshot))
    return found
