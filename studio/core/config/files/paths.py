"""Relative paths in a config, made absolute against the config file's folder (hub ids stay).

`resolve_paths` is the one way to do it; what it makes is a `ResolvedConfig`, the type the estimate,
the launch, the pre-flight checks, the bundle, the remote start and the sweep require, so a config
whose paths were never made absolute cannot reach them (mypy says so).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TypeVar

from pydantic import PrivateAttr

from studio.core.config.errors import ConfigError, ConfigIssue
from studio.core.config.files.toml_file import _line_of, load_config
from studio.core.config.schema import TrainConfig
from studio.core.text import plural

# The folder a config that never lived in one (a preset without a project, a measured GPU point) is
# resolved against: it does not exist, so its relative paths name nothing on this machine.
NO_FOLDER = Path(tempfile.gettempdir()) / "studio-config-without-a-folder"
C = TypeVar("C", bound=TrainConfig)


class ResolvedConfig(TrainConfig):
    """A TrainConfig whose relative paths are absolute against `base_dir` (the folder it was resolved
    against: the config file's, the project's). Made only by `resolve_paths`; a copy (`model_copy`)
    keeps the folder, and `varied` resolves a changed config (a fix, a preset, a sweep's value) against it."""

    _base_dir: Path | None = PrivateAttr(default=None)

    @property
    def base_dir(self) -> Path:
        if self._base_dir is None:
            raise TypeError("a ResolvedConfig is made by studio.core.config.files.paths.resolve_paths, not directly")
        return self._base_dir

    def varied(self, config: TrainConfig) -> ResolvedConfig:
        """`config` (a changed copy of this one: a fix, a preset, a sweep's value) with its paths resolved
        against the same folder. It takes `config` over: when its paths are this one's (already
        resolved), it is not copied or resolved again (the estimate tries dozens of changes per update)."""
        if _paths(config) == _paths(self):
            return _resolved(config, self.base_dir)
        return resolve_paths(config, self.base_dir)


def _paths(config: TrainConfig) -> tuple[object, ...]:
    """Every path field `resolve_paths` resolves, as written."""
    m, d = config.model, config.dataset
    return (m.base, m.vae, m.training_adapter, tuple((c.path, c.class_path) for c in d.concepts),
            d.validation_folder, d.mask_folder, tuple(d.control_folders), config.sampling.control_image,
            config.output.dir, config.launch.python)


def _resolved(config: TrainConfig, base_dir: Path) -> ResolvedConfig:
    """`config`'s own sections as a ResolvedConfig against `base_dir` (validated already: not again)."""
    out = ResolvedConfig.model_construct(config.model_fields_set, **dict(config))
    out._base_dir = base_dir
    return out


# What TOML's double quotes make of a Windows path's backslashes: "D:\new\train" holds a newline and a tab.
_ESCAPED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


def _resolve(base_dir: Path, value: str | None, hub_ok: bool, key: str) -> str | None:
    if value is None:
        return None
    found = [shown for char, shown in _ESCAPED.items() if char in value]
    if found:
        raise ConfigError("config", [ConfigIssue(
            key=key, value=value,
            message=f"holds a control character ({', '.join(found)} read as an escape): in double quotes TOML reads "
                    "each \\ as the start of an escape; write a Windows path in single quotes, "
                    "'D:\\new\\train', or with forward slashes, \"D:/new/train\"",
        )])
    p = Path(value).expanduser()
    if p.is_absolute():
        return _utf8(str(p), key, value)
    candidate = (base_dir / p)
    # "models/x" is a hub id unless it is meant as a path: it exists, or its first folder does
    # (then a missing model is reported as a missing folder, not as a model the hub lacks).
    if hub_ok and not candidate.exists() and _looks_like_hub_id(value) and not (base_dir / p.parts[0]).is_dir():
        return value
    return _utf8(str(candidate.resolve()), key, value)


def _utf8(path: str, key: str, value: str) -> str:
    """`path`, or a ConfigError when a folder on it has a name that is not valid UTF-8 (the config
    file, the events and the GUI all hold text; such a name cannot be written into them)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise ConfigError("config", [ConfigIssue(
            key=key, value=value,
            message=f"resolves to {shown}, whose folder names are not valid UTF-8 text; rename the folder "
                    "(the \\x.. part) so its name is plain text, or move the project to such a folder",
        )]) from None
    return path


def _looks_like_hub_id(value: str) -> bool:
    parts = value.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not value.startswith((".", "~"))
        and not value.endswith((".safetensors", ".ckpt"))
    )


def resolve_paths(config: TrainConfig, base_dir: str | Path) -> ResolvedConfig:
    """A copy whose relative paths are made absolute against `base_dir` (the config's folder).

    Hub ids (`org/name` that is not a local path) stay as they are. A path that cannot be made
    absolute raises ConfigError naming the field, its value and what to do.
    """
    base = Path(base_dir)
    out = _resolved(config.model_copy(deep=True), base)
    out.model.base = _resolve(base, out.model.base, True, "model.base") or out.model.base
    # An optional path written empty (vae = "": TOML has no "none") is none, as the rules read it; resolved, it
    # named the config's own folder: a VAE loaded from the project, the project's images held out for validation.
    out.model.vae = _resolve(base, out.model.vae or None, True, "model.vae")
    out.model.training_adapter = _resolve(base, out.model.training_adapter or None, False, "model.training_adapter")
    for index, concept in enumerate(out.dataset.concepts):
        key = f"dataset.concepts[{index}]"
        concept.path = _resolve(base, concept.path, False, f"{key}.path") or concept.path
        concept.class_path = _resolve(base, concept.class_path or None, False, f"{key}.class_path")
    out.dataset.validation_folder = _resolve(base, out.dataset.validation_folder or None, False,
                                             "dataset.validation_folder")
    out.dataset.mask_folder = _resolve(base, out.dataset.mask_folder or None, False, "dataset.mask_folder")
    out.dataset.control_folders = [_resolve(base, f, False, f"dataset.control_folders[{i}]") or f
                                   for i, f in enumerate(out.dataset.control_folders)]
    out.sampling.control_image = _resolve(base, out.sampling.control_image or None, False, "sampling.control_image")
    out.output.dir = _resolve(base, out.output.dir, False, "output.dir") or out.output.dir
    out.launch.python = _interpreter(base, out.launch.python)
    return out


def _interpreter(base_dir: Path, value: str | None) -> str | None:
    """launch.python: a path (venv/bin/python, ~/train/bin/python) against the config's folder as every path of
    it is, not against wherever the command runs; its links kept (a venv's python is a link to the one it was
    made from, which knows nothing of the venv's packages). A bare name (python3) is looked up on PATH."""
    if not value or ("/" not in value and os.sep not in value):
        return value
    return os.path.normpath(base_dir / Path(value).expanduser())


def config_folder(path: str | Path) -> Path:
    """The folder a config file's relative paths start at: the one the file is in as the person gave it, also
    when the file is a link to a config elsewhere (one config shared by several projects: each reads its own
    data/ and writes its own runs/)."""
    return Path(path).absolute().parent.resolve()


def load_resolved(path: str | Path) -> ResolvedConfig:
    """Load a config file and resolve its paths against its folder (`config_folder`)."""
    path = Path(path)
    config = load_config(path)
    try:
        return resolve_paths(config, config_folder(path))
    except ConfigError as exc:  # a path that cannot be used: named in the file that holds it, at its line
        text = path.read_text(encoding="utf-8-sig")
        for issue in exc.issues:
            issue.line = issue.line or _line_of(text, issue.key)
        raise ConfigError(str(path), exc.issues) from None




def moved_with_its_run(config: C, run_dir: Path) -> tuple[C, str]:
    """A run folder's config after the folder moved with its project (another disk, a renamed or copied
    project folder): config.toml names the dataset, the base model and the rest where they were, and a resume
    failed on a dataset folder that "does not exist" after loading the model. Where output.dir and `run_dir`'s
    folder differ, the folders they share at their ends stand for one another ("/old/proj/runs" and
    "/new/proj2/runs": /old/proj is /new/proj2 now), and each path under the old one that is gone and is there
    under the new one is read from there. The copy, and what moved in words ("" when nothing did)."""
    old, new = Path(config.output.dir), run_dir.resolve().parent
    while old.name and old.name == new.name and old.parent != old and new.parent != new:
        old, new = old.parent, new.parent
    if old == new or not old.is_absolute():
        return config, ""
    moved = config.model_copy(deep=True)
    moved.output.dir = str(run_dir.resolve().parent)
    changed: list[tuple[str, str]] = []

    def here(value: str | None) -> str | None:
        if not value or not Path(value).is_absolute() or Path(value).exists():
            return value
        try:
            candidate = new / Path(value).relative_to(old)
        except ValueError:
            return value
        if not candidate.exists():
            return value
        changed.append((value, str(candidate)))
        return str(candidate)

    m, d = moved.model, moved.dataset
    m.base = here(m.base) or m.base
    m.vae, m.training_adapter = here(m.vae), here(m.training_adapter)
    for concept in d.concepts:
        concept.path = here(concept.path) or concept.path
        concept.class_path = here(concept.class_path)
    d.validation_folder, d.mask_folder = here(d.validation_folder), here(d.mask_folder)
    d.control_folders = [here(folder) or folder for folder in d.control_folders]
    moved.sampling.control_image = here(moved.sampling.control_image or None) or moved.sampling.control_image
    moved.launch.python = here(moved.launch.python)
    if not changed:
        return moved, ""
    return moved, (f"the run folder moved with its project from {old} to {new}: {plural(len(changed), 'path')} of "
                   f"its config.toml under the old folder are read under the new one ({changed[0][0]} is "
                   f"{changed[0][1]})")
