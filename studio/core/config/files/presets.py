"""Presets: sparse TOML deltas over the config defaults, with a `[preset]` table.

Shipped presets live in the top-level `presets/` folder; a person's own presets in
the user config folder (platformdirs, or STUDIO_CONFIG_DIR). Applying a preset
keeps what belongs to the project (base model, image folders and what they hold, sample prompts,
output and launch settings) and takes everything else from the defaults and the delta.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from studio.core.config.errors import ConfigError, ConfigIssue, issues_from_validation
from studio.core.config.files.toml_file import config_to_data, parse_toml, validate_data
from studio.core.config.rules.swap_rules import published_blocks
from studio.core.config.schema import Family, MethodKind, TrainConfig
from studio.core.containment import windows_refusal
from studio.core.families import FAMILY_NAMES, family, own_sampling
from studio.core.files import atomic_write_text
from studio.core.resources import app_root
from studio.core.user_dirs import config_dir

# What a preset never changes: it belongs to the project, not to the recipe.
PROJECT_KEYS: dict[str, tuple[str, ...]] = {
    "model": ("base", "vae", "revision", "variant", "training_adapter"),
    "dataset": ("concepts",),
    "sampling": ("prompts", "negative_prompt"),
    "output": ("dir", "name"),
    "launch": (
        "num_processes", "num_machines", "gpu_ids", "main_process_ip",
        "main_process_port", "machine_rank", "python", "cpu",
    ),
}
# What a preset keeps from the project unless it sets it: what the images are (edit pairs, held-out images,
# loss masks) and how the person watches and keeps a run (samples, checkpoints, logs). Taken from the
# defaults, an edit-pair project trained its targets alone and a validation folder was dropped unsaid.
PROJECT_CHOICES: dict[str, tuple[str, ...]] = {
    "dataset": ("kind", "control_layout", "control_folders", "caption_extension", "validation_fraction",
                "validation_folder", "masks", "mask_folder"),
    "training": ("validation_every",),
    "sampling": ("every_n_steps", "at_start", "control_image"),
    "output": ("save_every_n_steps", "save_every_n_epochs", "keep_last", "log_to"),
}


class PresetInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1)
    description: str = ""
    family: Family
    method: MethodKind
    min_vram_gb: float = Field(gt=0, le=2048)  # per GPU
    gpus: int = Field(default=1, ge=1, le=1024)  # the processes (GPUs) the recipe is made for
    tradeoffs: str = ""


@dataclass
class Preset:
    id: str
    info: PresetInfo
    delta: dict[str, Any]
    path: Path
    user: bool = False
    issues: list[ConfigIssue] = field(default_factory=list)

    @property
    def title(self) -> str:
        return self.info.title

    @property
    def description(self) -> str:
        return self.info.description

    @property
    def family(self) -> str:
        return self.info.family

    @property
    def method(self) -> str:
        return self.info.method

    @property
    def min_vram_gb(self) -> float:
        return self.info.min_vram_gb

    @property
    def gpus(self) -> int:
        return self.info.gpus

    @property
    def tradeoffs(self) -> str:
        return self.info.tradeoffs

    @property
    def valid(self) -> bool:
        return not self.issues

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            **self.info.model_dump(),
            "user": self.user,
            "path": str(self.path),
            "valid": self.valid,
            "issues": [str(i) for i in self.issues],
            "settings": self.delta,
        }


def shipped_presets_dir() -> Path:
    override = os.environ.get("STUDIO_PRESETS_DIR")
    if override:
        return Path(override)
    return app_root() / "presets"


def user_presets_dir() -> Path:
    return config_dir() / "presets"


def _placeholder(preset: Preset) -> dict[str, Any]:
    """A project for checking a preset: its family, with a base of the size the preset is made for."""
    size = preset_size(preset)
    base = family(preset.family).size_bases[size] if size is not None else "base-model"
    return {"model": {"family": preset.family, "base": base}, "dataset": {"concepts": [{"path": "images"}]}}


def deep_merge(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in delta.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_preset(path: str | Path, user: bool = False) -> Preset:
    """Read one preset file; a preset whose settings do not validate carries its issues."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, [ConfigIssue(key="(file)", message=f"cannot be read: {exc}")]) from None
    data = parse_toml(text, source).unwrap()
    table = data.pop("preset", None)
    if not isinstance(table, dict):
        raise ConfigError(source, [ConfigIssue(
            key="preset", message="a preset file needs a [preset] table with title, family, method and min_vram_gb",
        )])
    try:
        info = PresetInfo.model_validate(table)
    except ValidationError as exc:
        issues = issues_from_validation(exc, TrainConfig)
        for issue in issues:
            issue.key = "preset." + issue.key.split(".", 1)[-1] if not issue.key.startswith("preset") else issue.key
        raise ConfigError(source, issues) from None
    preset = Preset(id=path.stem, info=info, delta=data, path=path, user=user)
    preset.issues = check_preset(preset)
    return preset


def check_preset(preset: Preset) -> list[ConfigIssue]:
    """Problems of a preset: invalid settings, project keys it must not set, a family mismatch."""
    issues: list[ConfigIssue] = []
    for section, keys in PROJECT_KEYS.items():
        for key in keys:
            if key in preset.delta.get(section, {}) and not (section == "model" and key == "family"):
                issues.append(ConfigIssue(
                    key=f"{section}.{key}", message="belongs to the project, not to a preset; remove it",
                ))
    fam = preset.delta.get("model", {}).get("family", preset.family)
    if fam != preset.family:
        issues.append(ConfigIssue(key="model.family", value=fam, message=f"differs from preset.family ({preset.family})"))
    kind = preset.delta.get("method", {}).get("kind", preset.method)
    if kind != preset.method:
        issues.append(ConfigIssue(key="method.kind", value=kind, message=f"differs from preset.method ({preset.method})"))
    try:
        validate_data(deep_merge(_placeholder(preset), preset.delta), str(preset.path))
    except ConfigError as exc:
        issues.extend(exc.issues)
    return issues


def list_presets(include_user: bool = True) -> list[Preset]:
    """Shipped presets, then the person's own, each sorted by family, method and VRAM."""
    found: list[Preset] = []
    folders = [(shipped_presets_dir(), False)]
    if include_user:
        folders.append((user_presets_dir(), True))
    for folder, user in folders:
        if not folder.is_dir():
            continue
        group = []
        for path in folder.glob("*.toml"):
            try:
                group.append(load_preset(path, user=user))
            except ConfigError:
                if not user:
                    raise
                continue  # A broken user preset must not hide the others; `studio-train validate` shows why.
        order = {name: place for place, name in enumerate(FAMILY_NAMES)}
        group.sort(key=lambda p: (order.get(p.family, 9), p.method, -p.min_vram_gb, p.id))
        found.extend(group)
    return found


def get_preset(preset_id: str) -> Preset:
    for preset in list_presets():
        if preset.id == preset_id:
            return preset
    ids = [p.id for p in list_presets()]
    # A typo (sdxl-lroa) among some forty ids: the nearest ones first, as an unknown config key is named.
    near = difflib.get_close_matches(preset_id, ids, n=3, cutoff=0.7)
    named = [f"'{i}'" for i in near]
    guess = f" (did you mean {' or '.join([', '.join(named[:-1]), named[-1]] if len(named) > 1 else named)}?)" \
        if near else ""
    raise KeyError(f"no preset named '{preset_id}'{guess}; known presets: {', '.join(ids)}")


def _fit_swapped_blocks(data: dict[str, Any]) -> None:
    """A preset made for a larger model of the family (FLUX.2 [klein] 9B's 32 blocks) applied to a project
    whose model has fewer keeps at least one of them on the GPU, as many swapped as that model allows."""
    model = data["model"]
    count = model.get("blocks_to_swap") or 0
    blocks = published_blocks(family(model["family"]).architecture(str(model.get("base") or ""))) if count else None
    if blocks is not None and count >= blocks:
        model["blocks_to_swap"] = blocks - 1


def apply_preset(config: TrainConfig, preset: Preset) -> TrainConfig:
    """The config with the preset's recipe and the project's own settings kept; a preset made for
    several GPUs brings its process count (its min_vram_gb is per GPU with that many), and one made for a
    larger model swaps at most all but one of the project model's blocks."""
    current = config.model_dump(mode="json")
    kept: dict[str, Any] = {}
    # A preset's own value of a project key is never taken, even where the project leaves the key empty: a
    # preset someone shared must not name the training interpreter (launch.python, a program Train runs),
    # a VAE or an adapter to load. check_preset lists such keys as the preset's issues.
    recipe = copy.deepcopy(preset.delta)
    for section, keys in PROJECT_KEYS.items():
        for key in keys:
            value = current.get(section, {}).get(key)
            if value is not None:
                kept.setdefault(section, {})[key] = value
            if isinstance(recipe.get(section), dict):
                recipe[section].pop(key, None)
    for section, keys in PROJECT_CHOICES.items():
        for key in keys:
            value = current.get(section, {}).get(key)
            if value is not None and key not in recipe.get(section, {}):
                kept.setdefault(section, {})[key] = value
    # A preset's samples' steps and guidance at its family's own are the family's, not a recipe's: the project's base
    # model, when it is sampled otherwise (Z-Image Turbo), gets its own.
    for key, own in own_sampling(preset.family).items():
        if isinstance(recipe.get("sampling"), dict) and recipe["sampling"].get(key) == own:
            del recipe["sampling"][key]
    if preset.method != "lora":  # a DreamBooth run saves checkpoints, not a LoRA per epoch
        kept.get("output", {}).pop("save_every_n_epochs", None)
    if preset.family != config.model.family:  # a separate VAE is its family's: its latents are not another's
        kept.get("model", {}).pop("vae", None)
    data = deep_merge(deep_merge({"model": {"family": preset.family}}, recipe), kept)
    data["model"]["family"] = preset.family
    _fit_swapped_blocks(data)
    if preset.gpus > 1:
        data.setdefault("launch", {})["num_processes"] = preset.gpus
    return validate_data(data, f"preset {preset.id}")


def default_settings(config: TrainConfig) -> TrainConfig:
    """The defaults for `config`'s family and base model (their samples' steps and guidance)."""
    return TrainConfig.model_validate({"model": {"family": config.model.family, "base": config.model.base}})


def replaced_settings(config: TrainConfig, applied: TrainConfig,
                      baseline: TrainConfig | None) -> list[tuple[str, Any, Any]]:
    """(key, the value now, the preset's) of each setting that applying a preset (`applied`) replaces and the person
    set: a value other than `baseline`'s (the config the last preset gave) or, with none, the default for its
    family and base model (their samples' steps). The family and the base model are left out: choosing a preset
    says what they become."""
    if baseline is None:
        baseline = default_settings(config)
    replaced = []
    for section in TrainConfig.model_fields:
        now = getattr(config, section)
        if not isinstance(now, BaseModel):
            continue
        then, before = getattr(applied, section), getattr(baseline, section)
        for name in type(now).model_fields:
            if section == "model" and name in ("family", "base"):
                continue
            old, new, start = getattr(now, name), getattr(then, name), getattr(before, name)
            if old != new and old != start:
                replaced.append((f"{section}.{name}", old, new))
    return replaced


def preset_size(preset: Preset) -> str | None:
    """The size a preset is made for in a family of several sizes, as its id names it ("9b" for
    flux2-klein-9b-lora-40gb); None for a family of one size or an id that names none."""
    sizes = family(preset.family).size_bases
    return next((size for size in sizes if size in preset.id.split("-")), None)


def size_base_for(preset: Preset, config: TrainConfig) -> str | None:
    """The hub base of the preset's size when `config` (its paths resolved: a model folder is read) trains
    another size or another family; None when it trains that size already or the preset names no size."""
    size = preset_size(preset)
    spec = family(preset.family)
    if size is None or spec.size_of is None:
        return None
    if config.model.family == preset.family and spec.size_of(config.model.base) == size:
        return None
    return spec.size_bases[size]


def preset_delta(config: TrainConfig) -> dict[str, Any]:
    """The recipe part of a config: its non-default values without the project's keys."""
    data = config_to_data(config)
    data.pop("schema_version", None)
    for section, keys in (*PROJECT_KEYS.items(), *PROJECT_CHOICES.items()):
        for key in keys:
            data.get(section, {}).pop(key, None)
    return {k: v for k, v in data.items() if v}


def _slug(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    # A preset titled "Aux" or "COM1" would be aux.toml, a device on Windows: the save would write nowhere.
    return f"{slug}-preset" if windows_refusal(slug) else slug or "preset"


def user_preset_path(title: str) -> Path:
    """The file of the person's preset titled `title`: the one holding it already, else a new one. A preset
    of another title whose name reads the same in a file name ("Cats!" and "cats", or titles in a script
    other than Latin, which all read "preset") keeps its own file, and so does a shipped preset: its id (the
    file's name) is how `studio-train estimate --preset` finds the person's own."""
    slug = _slug(title)
    shipped = {path.stem for path in shipped_presets_dir().glob("*.toml")}
    number = 1
    while True:
        path = user_presets_dir() / (f"{slug}.toml" if number == 1 else f"{slug}-{number}.toml")
        if not path.exists():
            if path.stem not in shipped:
                return path
        else:
            try:
                if load_preset(path, user=True).title == title:
                    return path
            except ConfigError:
                pass  # a file the person may still mend: never written over
        number += 1


def save_user_preset(
    title: str,
    config: TrainConfig,
    base_preset: Preset | None = None,
    description: str = "",
    min_vram_gb: float | None = None,
    tradeoffs: str = "",
) -> Preset:
    """Save the recipe of `config` as the person's own preset and return it."""
    folder = user_presets_dir()
    folder.mkdir(parents=True, exist_ok=True)
    doc = tomlkit.document()
    table = tomlkit.table()
    table["title"] = title
    table["description"] = description or (f"Based on {base_preset.title}." if base_preset else "")
    table["family"] = config.model.family
    table["method"] = config.method.kind
    table["min_vram_gb"] = float(min_vram_gb or (base_preset.min_vram_gb if base_preset else 8))
    table["tradeoffs"] = tradeoffs or (base_preset.tradeoffs if base_preset else "")
    doc["preset"] = table
    for key, value in preset_delta(config).items():
        doc[key] = value
    path = user_preset_path(title)
    atomic_write_text(path, tomlkit.dumps(doc))
    return load_preset(path, user=True)


def _leaves(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_leaves(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out


def matching_preset(config: TrainConfig, presets: list[Preset]) -> str:
    """The name a run's config goes by: the title of the preset whose every setting it has, the
    nearest preset's title with "(changed)" when at least half agree, else "custom"."""
    values = _leaves(config.model_dump(mode="json"))
    best, best_share, best_size = "", 0.0, 0
    for preset in presets:
        if preset.family != config.model.family or preset.method != config.method.kind:
            continue
        # The samples' steps and guidance at the family's own are every config's that names none: no likeness.
        own: dict[tuple[str, ...], Any] = {("sampling", key): value for key, value in own_sampling(preset.family).items()}
        wanted = {key: value for key, value in _leaves(preset.delta).items() if own.get(key, object()) != value}
        share = sum(values.get(key) == value for key, value in wanted.items()) / max(len(wanted), 1)
        if (share, len(wanted)) > (best_share, best_size):
            best, best_share, best_size = preset.title, share, len(wanted)
    if best_share == 1.0:
        return best
    return f"{best} (changed)" if best_share >= 0.5 else "custom"
