"""The first step of an export: read the config and decide what the bundle holds, writing nothing.

Every refusal (a local path or a token the remote side cannot use, a missing dataset, a GPU
type not in the catalogue) happens here, before a byte is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from studio.core.config.errors import issues_from_validation
from studio.core.config.files.paths import ResolvedConfig, config_folder, resolve_paths
from studio.core.config.files.toml_file import config_to_data, load_config
from studio.core.config.schema import ConceptSection, LaunchSection, TrainConfig
from studio.core.dataset.edit_pairs.controls import ControlSettings
from studio.core.dataset.image_headers import is_image_name
from studio.core.dataset.scan import DatasetError, ImageEntry, scan_concept
from studio.core.export.bundle_files import absolute_paths, find_secrets, folder_size
from studio.core.export.cost import vram_estimator
from studio.core.export.dataset_selection import DatasetSelection, select_concept, select_files
from studio.core.export.gpu_catalogue import GpuType, load_catalogue
from studio.core.export.sky_task import CloudOptions
from studio.core.quoting import shown

DATASET_DIR = "dataset"
MODEL_DIR = "model"
RUNS_DIR = "runs"
MANIFEST = f"{DATASET_DIR}/manifest.json"

_GENERIC_GPU = GpuType(id="generic", name="generic 80GB GPU", vram_gb=80, bf16=True, throughput=1.0,
                       price_min=0.0, price_max=0.0)


class ExportError(ValueError):
    """The bundle cannot be made; the message says what, where and what to do."""


class LocalModelError(ExportError):
    """The base model or VAE is a local file or folder and the export was told neither to copy it nor
    where it is remotely. `says(include, remote)` words the fix with the caller's controls (the CLI's
    flags by default, the Export page's checkbox and field)."""

    def __init__(self, what: str, local: Path, size_gb: float) -> None:
        self.what, self.local, self.size_gb = what, local, size_gb
        super().__init__(self.says("--include-model", "--remote-base ID_OR_PATH"))

    def says(self, include: str, remote: str) -> str:
        where = remote if self.what == "base model" else "a hub id in model.vae"
        kind = "folder" if self.local.is_dir() else "file"
        return (f"the {self.what} is a local {kind} ({self.local}, {self.size_gb:.1f} GB): either copy it into "
                f"the bundle with {include}, or name where it is on the remote machine ({where})")


def is_hub_id(value: str) -> bool:
    parts = value.split("/")
    return (len(parts) == 2 and all(parts) and not value.startswith((".", "~", "/"))
            and not value.endswith((".safetensors", ".ckpt")) and ":" not in value)


def _unique(name: str, taken: set[str]) -> str:
    candidate, counter = name, 2
    while candidate in taken:
        candidate, counter = f"{name}-{counter}", counter + 1
    taken.add(candidate)
    return candidate


def _scaled(value: int, factor: float) -> int:
    return 0 if value == 0 else max(1, round(value * factor))


def scale_steps(config: TrainConfig, processes: int) -> float:
    """Keep the images seen when the process count changes: max_steps (and the step-based
    intervals) shrink by the same factor the effective batch grows. Returns the factor."""
    t = config.training
    if t.max_steps is None or processes == config.launch.num_processes:
        return 1.0
    factor = config.launch.num_processes / processes
    t.max_steps = max(1, math.ceil(t.max_steps * factor))
    # A warm-up or an interval shrinks with the steps, never to nothing (a warm-up of 1 step became 0, and the
    # validation loss was measured a quarter as often on four times the GPUs).
    t.lr_warmup_steps = _scaled(t.lr_warmup_steps, factor)
    t.validation_every = _scaled(t.validation_every, factor)
    config.sampling.every_n_steps = _scaled(config.sampling.every_n_steps, factor)
    config.output.save_every_n_steps = _scaled(config.output.save_every_n_steps, factor)
    return factor


def _model_value(raw: str | None, resolved: str | None, what: str, remote: str | None,
                 include: bool, out: Path, copies: list[tuple[Path, Path]]) -> tuple[str | None, str]:
    """The bundle's value for the base model or VAE, and its kind (hub | bundle | remote)."""
    if raw is None or resolved is None:
        return None, "none"
    if remote:
        return remote, "hub" if is_hub_id(remote) else "remote"
    local = Path(resolved)
    if not local.is_absolute():  # resolve_paths keeps hub ids as they are
        return raw, "hub"
    if not local.exists():
        key = {"base model": "base", "VAE": "vae"}.get(what, what.replace(" ", "_"))
        raise ExportError(f"{what} {local} does not exist; fix model.{key} in the config or give a hub id")
    if not include:
        raise LocalModelError(what, local, folder_size(local) / 2**30)
    rel = f"{MODEL_DIR}/{local.name}"
    copies.append((local, out / rel))
    return rel, "bundle"


@dataclass
class BundlePlan:
    """Everything `export_bundle` decided before writing a byte (the validate step)."""

    config_path: Path
    out: Path
    bundle: TrainConfig  # the config as the remote side reads it
    gpus: int
    nodes: int
    gpu: GpuType | None
    base_kind: str
    data_root: str
    include_dataset: bool
    datasets: list[DatasetSelection]
    copies: list[tuple[Path, Path]]  # model files: (local, in the bundle)
    original_steps: int | None
    vram: int | None
    warnings: list[str] = field(default_factory=list)
    cloud: CloudOptions = field(default_factory=CloudOptions)

    @property
    def processes(self) -> int:
        return self.gpus * self.nodes


def validate_bundle(config_path: str | Path, out_dir: str | Path, gpus: int, nodes: int, gpu_type: str | None,
                    include_dataset: bool, remote_base: str | None, include_model: bool,
                    remote_dataset: str | None, main_address: str, port: int, keep_steps: bool) -> BundlePlan:
    """Read the config and decide the bundle's content; ExportError names any problem. Writes nothing."""
    config_path = config_folder(config_path) / Path(config_path).name  # a linked config: its paths start here
    out = Path(out_dir).resolve()
    if gpus < 1 or nodes < 1:
        raise ExportError(f"gpus ({gpus}) and nodes ({nodes}) must be at least 1")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty; choose a new folder for the bundle")
    config = load_config(config_path)
    resolved = resolve_paths(config, config_path.parent)
    bundle = config.model_copy(deep=True)
    copies: list[tuple[Path, Path]] = []
    base, base_kind = _model_value(config.model.base, resolved.model.base, "base model",
                                   remote_base, include_model, out, copies)
    bundle.model.base = base or config.model.base
    bundle.model.vae, _ = _model_value(config.model.vae, resolved.model.vae, "VAE", None, include_model, out, copies)
    # A training adapter is part of the recipe (a LoRA file, small beside the model): it always travels.
    bundle.model.training_adapter, _ = _model_value(config.model.training_adapter, resolved.model.training_adapter,
                                                    "training adapter", None, True, out, copies)
    data_root = remote_dataset.rstrip("/") if remote_dataset else DATASET_DIR
    datasets = _select_datasets(bundle, resolved, data_root, config_path)
    plan = BundlePlan(config_path, out, bundle, gpus, nodes, _gpu_type(gpu_type), base_kind, data_root,
                      include_dataset, datasets, copies, bundle.training.max_steps, None)
    if not keep_steps:
        factor = scale_steps(bundle, plan.processes)
        if factor != 1.0:
            plan.warnings.append(f"max_steps {plan.original_steps} -> {bundle.training.max_steps} so that "
                                 f"{plan.processes} processes see the same number of images; learning rate kept")
    bundle.output.dir = RUNS_DIR
    launch = {**bundle.launch.model_dump(), "num_processes": plan.processes, "num_machines": nodes, "machine_rank": 0,
              "gpu_ids": "all", "main_process_ip": main_address, "main_process_port": port, "python": None,
              "cpu": False}
    try:  # --port 70000 or an address with a line break: said as the flag, not as a traceback at the estimate
        bundle.launch = LaunchSection.model_validate(launch)
    except ValidationError as exc:
        flags = {"main_process_port": "--port", "main_process_ip": "--main-address"}
        raise ExportError("; ".join(
            f"{flags.get(issue.key, 'launch.' + issue.key)} "
            f"{shown(issue.value) if isinstance(issue.value, str) else issue.value}: "
            f"{issue.message.removeprefix('value error, ')}"
            for issue in issues_from_validation(exc, LaunchSection))) from None
    _refuse_secrets_and_paths(bundle, remote_base, remote_dataset, config_path)
    _choose_strategy(bundle, _sized(bundle, resolved, out), plan.gpu or _GENERIC_GPU, plan.warnings)
    plan.vram = vram_estimator(_sized(bundle, resolved, out))(plan.gpu or _GENERIC_GPU, plan.processes)
    gpu = plan.gpu
    if gpu is not None and plan.vram is not None and plan.vram > gpu.vram_mb:
        plan.warnings.append(f"the estimate ({plan.vram / 1024:.1f} GB per GPU) exceeds the {gpu.name}'s "
                             f"{gpu.vram_gb:.0f} GB")
    plan.warnings.extend(_skipped_warning(datasets))
    return plan


def _sized(bundle: TrainConfig, resolved: ResolvedConfig, out: Path) -> ResolvedConfig:
    """The bundle as the estimate sizes it: its own paths resolved against the bundle's folder, with the
    model the project has here (a small local model is sized as it is, before it is copied)."""
    model = bundle.model.model_copy(update={"base": resolved.model.base})
    return resolve_paths(bundle.model_copy(update={"model": model}), out)


def _choose_strategy(bundle: TrainConfig, sized: ResolvedConfig, gpu: GpuType, warnings: list[str]) -> None:
    """Shard a DreamBooth whose data-parallel copies (`sized`: the bundle as the estimate sizes it) would
    not fit the remote GPUs (and say so)."""
    from studio.core.estimate.sharded.sharded_estimate import plan_gpus
    from studio.core.hardware.report import GPUInfo

    processes = bundle.launch.num_processes
    if processes < 2 or bundle.launch.strategy != "ddp":
        return
    info = GPUInfo(index=0, name=gpu.name, total_mb=gpu.vram_mb, free_mb=gpu.vram_mb, bf16=gpu.bf16)
    plan = plan_gpus(sized, info, processes)
    if plan.proposes_fsdp and plan.fsdp is not None:
        bundle.launch.strategy = "fsdp"
        warnings.append(f"launch.strategy ddp -> fsdp: data parallel needs {plan.ddp.total_gb:.1f} GB per GPU, more "
                        f"than the {gpu.name}'s {gpu.vram_gb:.0f} GB; sharded across {processes} GPUs it needs "
                        f"{plan.fsdp.total_gb:.1f} GB")


def _select_datasets(bundle: TrainConfig, resolved: ResolvedConfig, data_root: str,
                     config_path: Path) -> list[DatasetSelection]:
    """Point every concept of `bundle` at its copy under `data_root`; what each folder contributes."""
    selections: list[DatasetSelection] = []
    taken: set[str] = set()
    for concept, local in _concept_pairs(bundle, resolved):
        for attr, path in (("path", local.path), ("class_path", local.class_path)):
            if path is None:
                continue
            folder = Path(path)
            name = _unique(folder.name, taken)
            if attr == "path" and not folder.is_dir():
                raise ExportError(f"dataset folder {folder} does not exist; fix dataset.concepts in {config_path}")
            if folder.is_dir():
                try:
                    selections.append(select_concept(local, name, classes=attr == "class_path"))
                except ValueError as exc:
                    raise ExportError(str(exc)) from None
            setattr(concept, attr, f"{data_root}/{name}")
    _select_other_folders(bundle, resolved, data_root, selections, taken)
    return selections


def _select_other_folders(bundle: TrainConfig, resolved: ResolvedConfig, data_root: str,
                          selections: list[DatasetSelection], taken: set[str]) -> None:
    """The other images the run reads (the validation folder, the mask folder, an edit dataset's control folders
    and its sample's control image) travel too: their bundle paths named the project's folders, which the rented
    machine does not have, so the run stopped there after the machine was paid for."""
    d, local = bundle.dataset, resolved.dataset
    if local.validation_folder:
        d.validation_folder = _carried_folder("dataset.validation_folder", local.validation_folder, True, data_root,
                                              selections, taken)
    if d.masks == "folder" and local.mask_folder:
        d.mask_folder = _carried_folder("dataset.mask_folder", local.mask_folder, False, data_root, selections, taken)
    if d.kind != "edit":
        return
    d.control_folders = [_carried_folder(f"dataset.control_folders[{index}]", path, False, data_root, selections,
                                         taken) for index, path in enumerate(local.control_folders)]
    if not local.control_folders:
        # Control folders beside an image folder (data/target/ with data/control/) are found there by their place:
        # they are carried beside its copy under their own names.
        for concept in local.concepts:
            for beside in ControlSettings(d.control_layout).for_concept(Path(concept.path)).folders:
                _carried(beside, [], False, data_root, selections, taken)
    if resolved.sampling.control_image:
        file = Path(resolved.sampling.control_image)
        if not file.is_file():
            raise ExportError(f"sampling.control_image {file} does not exist; fix sampling.control_image in the "
                              "config or leave it empty")
        folder = _carried(file.parent, [file], False, data_root, selections, taken)
        bundle.sampling.control_image = f"{folder}/{file.name}"


def _carried_folder(key: str, path: str, captions: bool, data_root: str, selections: list[DatasetSelection],
                    taken: set[str]) -> str:
    folder = Path(path)
    if not folder.is_dir():
        raise ExportError(f"{key} {folder} does not exist; fix {key} in the config or leave it empty")
    return _carried(folder, [], captions, data_root, selections, taken)


def _carried(folder: Path, only: list[Path], captions: bool, data_root: str,
             selections: list[DatasetSelection], taken: set[str]) -> str:
    """`folder`'s path in the bundle: inside a folder the bundle carries already (a val/ folder among the
    training images keeps its place, so the run still holds it out), else a folder of its own. Its images (or
    `only` those), with their captions when `captions`, join the files carried."""
    concept = ConceptSection(path=str(folder), caption_source="auto" if captions else "prompt")
    try:
        entries = scan_concept(concept) if captions else []
    except DatasetError as exc:
        raise ExportError(str(exc)) from None
    if not captions:
        entries = [ImageEntry(path=p, caption=None, caption_path=None, caption_source="none", repeats=1,
                              concept=str(folder)) for p in only or _images_in(folder)]
    real = folder.resolve()
    for selection in selections:
        root = selection.root.resolve()
        if real == root or root in real.parents:
            picked = select_files(selection.name, selection.root, entries)
            selection.files = sorted(set(selection.files) | set(picked.files),
                                     key=lambda p: p.relative_to(selection.root).as_posix())
            carried = {p.relative_to(selection.root).as_posix() for p in picked.files}
            selection.skipped = [s for s in selection.skipped if s[0] not in carried]
            rel = real.relative_to(root).as_posix()
            return f"{data_root}/{selection.name}" + ("" if rel == "." else f"/{rel}")
    name = _unique(folder.name, taken)
    selections.append(select_files(name, folder, entries))
    return f"{data_root}/{name}"


def _images_in(folder: Path) -> list[Path]:
    """The images directly in `folder`, as the trainer reads a mask or control folder."""
    return sorted(p for p in folder.iterdir() if is_image_name(p.name) and p.is_file())


def _skipped_warning(selections: list[DatasetSelection]) -> list[str]:
    skipped = [f"{s.name}/{rel}" for s in selections for rel, _why in s.skipped]
    if not skipped:
        return []
    shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
    return [f"{len(skipped)} file(s) of the dataset folders were left out (only images, their captions and "
            f"metadata.jsonl go into a bundle; links out of a dataset folder are not followed): {shown}; "
            f"{MANIFEST} lists each with the reason"]


def _concept_pairs(bundle: TrainConfig, resolved: ResolvedConfig) -> list[tuple[Any, Any]]:
    return list(zip(bundle.dataset.concepts, resolved.dataset.concepts, strict=True))


def _gpu_type(name: str | None) -> GpuType | None:
    if not name:
        return None
    try:
        return load_catalogue().get(name)
    except KeyError as exc:
        raise ExportError(str(exc.args[0])) from None


def _refuse_secrets_and_paths(bundle: TrainConfig, remote_base: str | None, remote_dataset: str | None,
                              source: Path) -> None:
    data = config_to_data(bundle)
    secrets = find_secrets(data)
    if secrets:
        raise ExportError(f"{source}: {', '.join(secrets)} look like a token or password; remove them "
                          "(a hub token is read from HF_TOKEN on the remote machine)")
    # Paths the person named on the remote side are meant to be absolute.
    allowed = {remote_base} if remote_base else set()
    if remote_dataset:
        for concept in bundle.dataset.concepts:
            allowed |= {concept.path, concept.class_path or concept.path}
        d = bundle.dataset
        allowed |= {v for v in (d.validation_folder, d.mask_folder, *d.control_folders, bundle.sampling.control_image)
                    if v and v.startswith(remote_dataset.rstrip("/") + "/")}
    local = absolute_paths(data, allowed=frozenset(allowed))
    if local:
        raise ExportError(f"{source}: {', '.join(local)} still hold a path of this machine; "
                          "the bundle needs paths on the remote side")
