"""The remote-run bundle: a folder (or zip) that trains a config on a rented multi-GPU machine.

`export_bundle` writes config.toml with paths relative to the bundle, the accelerate
configs, launch.sh / check.sh, pinned requirements, a Dockerfile, the dataset (or its
manifest), a source copy of the trainer and a README for the person on the remote side.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shutil
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio import __version__
from studio.core.config.paths import resolve_paths
from studio.core.config.schema import TrainConfig
from studio.core.config.toml_file import config_to_data, dump_resolved, load_config
from studio.core.export.bundle_files import (
    Progress,
    absolute_paths,
    build_manifest,
    copy_studio_source,
    copy_tree,
    find_secrets,
    folder_size,
    installed_version,
    pinned_requirements,
    secrets_in_text,
)
from studio.core.export.check import human_size
from studio.core.export.cost import vram_estimator
from studio.core.export.gpu_catalogue import GpuType, load_catalogue
from studio.core.export.templates import readme_text, render
from studio.core.files import atomic_write_text
from studio.core.resources import resource_path
from studio.core.runs.launch import accelerate_config, dump_yaml

BUNDLE_FILE = "bundle.json"
DATASET_DIR = "dataset"
MODEL_DIR = "model"
RUNS_DIR = "runs"
SOURCE_DIR = "src"
MANIFEST = f"{DATASET_DIR}/manifest.json"
REMOTE_COMMAND = "./launch.sh --check"

# Rough sizes for the free-disk check: denoiser parameters (billions), hub download (GB).
_DENOISER_B = {"sd15": 0.86, "sdxl": 2.6, "sd3": 2.0}
_DOWNLOAD_GB = {"sd15": 4.5, "sdxl": 7.0, "sd3": 16.0}
_GENERIC_GPU = GpuType(id="generic", name="generic 80GB GPU", vram_gb=80, bf16=True, throughput=1.0,
                       price_min=0.0, price_max=0.0)


class ExportError(ValueError):
    """The bundle cannot be made; the message says what, where and what to do."""


@dataclass
class BundleReport:
    out_dir: Path
    zip_path: Path | None
    files: int
    bytes: int
    dataset_files: int
    dataset_bytes: int
    dataset_included: bool
    base_model: str
    base_kind: str  # hub | bundle | remote
    gpus_per_node: int
    nodes: int
    gpu_type: str | None
    steps: int | None
    original_steps: int | None
    effective_batch: int
    vram_estimate_mb: int | None
    warnings: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return REMOTE_COMMAND

    def node_commands(self) -> list[str]:
        """The command for each node (several nodes need the main node's address)."""
        if self.nodes == 1:
            return [REMOTE_COMMAND]
        return [f"MAIN_PROCESS_IP=<address of node 0> MACHINE_RANK={rank} {REMOTE_COMMAND}"
                for rank in range(self.nodes)]

    def summary(self) -> str:
        where = self.zip_path or self.out_dir
        data = "included" if self.dataset_included else "manifest only (copy the dataset there)"
        lines = [
            f"Bundle written to {where} ({self.files} files, {human_size(self.bytes)})",
            f"  GPUs: {self.nodes} node(s) x {self.gpus_per_node}" + (f" {self.gpu_type}" if self.gpu_type else ""),
            f"  Dataset: {self.dataset_files} files, {human_size(self.dataset_bytes)}, {data}",
            f"  Base model: {self.base_model} ({self.base_kind})",
            f"  Effective batch {self.effective_batch}"
            + (f"; max_steps {self.original_steps} -> {self.steps}" if self.steps != self.original_steps else ""),
            "On the remote machine, inside the bundle folder, run:",
            *(f"  {c}" for c in self.node_commands()),
            *(f"Note: {w}" for w in self.warnings),
        ]
        return "\n".join(lines)


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
    t.lr_warmup_steps = round(t.lr_warmup_steps * factor)
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
        raise ExportError(f"{what} {local} does not exist; fix model.{'base' if what == 'base model' else 'vae'} "
                          "in the config or give a hub id")
    if not include:
        size = folder_size(local) / 2**30
        flag = "--remote-base ID_OR_PATH" if what == "base model" else "a hub id in model.vae"
        raise ExportError(
            f"the {what} is a local {'folder' if local.is_dir() else 'file'} ({local}, {size:.1f} GB): either copy "
            f"it into the bundle with --include-model, or name where it is on the remote machine ({flag})"
        )
    rel = f"{MODEL_DIR}/{local.name}"
    copies.append((local, out / rel))
    return rel, "bundle"


def _disk_needed_mb(config: TrainConfig, base_kind: str) -> int:
    family, keep = config.model.family, config.output.keep_last + 1
    params = _DENOISER_B[family] * 1e9
    if config.method.kind == "dreambooth":
        checkpoint, output = params * 4 * 3, params * 2 + 1.5e9
    else:
        checkpoint, output = 3e8, 2e8
    download = _DOWNLOAD_GB[family] * 1e9 if base_kind == "hub" else 0
    return int((keep * checkpoint + output + download + 2e9) / 2**20)


def export_bundle(
    config_path: str | Path,
    out_dir: str | Path,
    gpus: int = 1,
    nodes: int = 1,
    gpu_type: str | None = None,
    include_dataset: bool = True,
    remote_base: str | None = None,
    include_model: bool = False,
    remote_dataset: str | None = None,
    zip: bool = False,
    main_address: str = "127.0.0.1",
    port: int = 29500,
    keep_steps: bool = False,
    progress: Progress | None = None,
) -> BundleReport:
    """Write a bundle for `gpus` per node x `nodes`; see the module docstring."""
    config_path = Path(config_path).resolve()
    out = Path(out_dir).resolve()
    if gpus < 1 or nodes < 1:
        raise ExportError(f"gpus ({gpus}) and nodes ({nodes}) must be at least 1")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty; choose a new folder for the bundle")
    config = load_config(config_path)
    resolved = resolve_paths(config, config_path.parent)
    gpu = _gpu_type(gpu_type)

    bundle = config.model_copy(deep=True)
    warnings: list[str] = []
    copies: list[tuple[Path, Path]] = []
    base, base_kind = _model_value(config.model.base, resolved.model.base, "base model",
                                   remote_base, include_model, out, copies)
    bundle.model.base = base or config.model.base
    bundle.model.vae, _ = _model_value(config.model.vae, resolved.model.vae, "VAE", None, include_model, out, copies)

    folders: dict[str, Path] = {}
    taken: set[str] = set()
    data_root = remote_dataset.rstrip("/") if remote_dataset else DATASET_DIR
    for concept, local in _concept_pairs(bundle, resolved):
        for attr, path in (("path", local.path), ("class_path", local.class_path)):
            if path is None:
                continue
            folder = Path(path)
            name = _unique(folder.name, taken)
            if attr == "path" and not folder.is_dir():
                raise ExportError(f"dataset folder {folder} does not exist; fix dataset.concepts in {config_path}")
            if folder.is_dir():
                folders[name] = folder
            setattr(concept, attr, f"{data_root}/{name}")

    processes = gpus * nodes
    original_steps = bundle.training.max_steps
    if not keep_steps:
        factor = scale_steps(bundle, processes)
        if factor != 1.0:
            warnings.append(f"max_steps {original_steps} -> {bundle.training.max_steps} so that {processes} "
                            "processes see the same number of images; learning rate kept")
    bundle.output.dir = RUNS_DIR
    bundle.launch = bundle.launch.model_copy(update={
        "num_processes": processes, "num_machines": nodes, "machine_rank": 0, "gpu_ids": "all",
        "main_process_ip": main_address, "main_process_port": port, "python": None, "cpu": False})
    _refuse_secrets_and_paths(bundle, remote_base, remote_dataset, config_path)

    _choose_strategy(bundle, gpu or _GENERIC_GPU, warnings)
    estimator = vram_estimator(bundle)
    vram = estimator(gpu or _GENERIC_GPU, processes)
    if gpu is not None and vram is not None and vram > gpu.vram_mb:
        warnings.append(f"the estimate ({vram / 1024:.1f} GB per GPU) exceeds the {gpu.name}'s {gpu.vram_gb:.0f} GB")

    out.mkdir(parents=True, exist_ok=True)
    (out / DATASET_DIR).mkdir()
    (out / RUNS_DIR).mkdir()
    manifest = build_manifest(folders, out / DATASET_DIR if include_dataset else None, progress)
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    for number, (src, dest) in enumerate(copies, start=1):
        if progress:
            progress(f"model {src.name}", number, len(copies))
        copy_tree(src, dest)
    if progress:
        progress("studio source", 0, 1)
    copy_studio_source(out / SOURCE_DIR)

    t = bundle.training
    effective_batch = t.batch_size * t.gradient_accumulation * processes
    info: dict[str, Any] = {
        "studio_version": __version__,
        "exported": _dt.datetime.now().isoformat(timespec="seconds"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "gpu_type": gpu.name if gpu else None,
        "gpus_per_node": gpus, "nodes": nodes, "num_processes": processes,
        "vram_estimate_mb": vram,
        "disk_needed_mb": _disk_needed_mb(bundle, base_kind),
        "base_model": {"kind": base_kind, "value": bundle.model.base},
        "dataset": {"included": include_dataset, "root": data_root, "manifest": MANIFEST,
                    "files": len(manifest["files"]), "bytes": manifest["total_bytes"]},
        "steps": {"original": original_steps, "bundle": t.max_steps, "epochs": t.epochs},
        "effective_batch": effective_batch,
        "learning_rate": t.learning_rate,
    }
    _write_files(out, bundle, info, config_path)
    report = BundleReport(
        out_dir=out, zip_path=None, files=0, bytes=0, dataset_files=len(manifest["files"]),
        dataset_bytes=manifest["total_bytes"], dataset_included=include_dataset,
        base_model=str(bundle.model.base), base_kind=base_kind, gpus_per_node=gpus, nodes=nodes,
        gpu_type=gpu.name if gpu else None, steps=t.max_steps, original_steps=original_steps,
        effective_batch=effective_batch, vram_estimate_mb=vram, warnings=warnings,
    )
    all_files = [p for p in out.rglob("*") if p.is_file()]
    report.files, report.bytes = len(all_files), sum(p.stat().st_size for p in all_files)
    if zip:
        if progress:
            progress("zip", 0, 1)
        report.zip_path = zip_bundle(out)
    if progress:
        progress("done", 1, 1)
    return report


def _choose_strategy(bundle: TrainConfig, gpu: GpuType, warnings: list[str]) -> None:
    """Shard a DreamBooth whose data-parallel copies would not fit the remote GPUs (and say so)."""
    from studio.core.hardware.report import GPUInfo
    from studio.core.hardware.sharded_estimate import plan_gpus

    processes = bundle.launch.num_processes
    if processes < 2 or bundle.launch.strategy != "ddp":
        return
    info = GPUInfo(index=0, name=gpu.name, total_mb=gpu.vram_mb, free_mb=gpu.vram_mb, bf16=gpu.bf16)
    plan = plan_gpus(bundle, info, processes)
    if plan.proposes_fsdp and plan.fsdp is not None:
        bundle.launch.strategy = "fsdp"
        warnings.append(f"launch.strategy ddp -> fsdp: data parallel needs {plan.ddp.total_gb:.1f} GB per GPU, more "
                        f"than the {gpu.name}'s {gpu.vram_gb:.0f} GB; sharded across {processes} GPUs it needs "
                        f"{plan.fsdp.total_gb:.1f} GB")


def _concept_pairs(bundle: TrainConfig, resolved: TrainConfig) -> list[tuple[Any, Any]]:
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
    local = absolute_paths(data, allowed=frozenset(allowed))
    if local:
        raise ExportError(f"{source}: {', '.join(local)} still hold a path of this machine; "
                          "the bundle needs paths on the remote side")


def _write_files(out: Path, bundle: TrainConfig, info: dict[str, Any], source: Path) -> None:
    stamp = info["exported"]
    per_node, multi = info["gpus_per_node"], max(info["nodes"], 2)
    header = (f"# Exported by SD Training Studio {__version__} on {stamp} from {source.name}.\n"
              "# Paths are relative to this folder; no token is stored (set HF_TOKEN on the remote side).\n")
    texts: dict[str, str] = {
        "config.toml": header + dump_resolved(bundle),
        "accelerate/single_node.yaml": dump_yaml(accelerate_config(_with_nodes(bundle, 1, per_node))),
        # Made for the exported node count, or as a template for 2 when exported for one node.
        "accelerate/multi_node.yaml": dump_yaml(accelerate_config(_with_nodes(bundle, multi, per_node))),
        "requirements.txt": pinned_requirements(bundle.training.optimizer),
        BUNDLE_FILE: json.dumps(info, indent=1) + "\n",
        "README.md": readme_text(bundle, info, out.name),
    }
    values = {"TITLE": f"{bundle.output.name} ({bundle.model.family} {bundle.method.kind})",
              "GPUS_PER_NODE": str(info["gpus_per_node"]), "NODES": str(info["nodes"]),
              "PORT": str(bundle.launch.main_process_port),
              "TORCH": (installed_version("torch") or "2.5.1").split("+")[0]}
    for name, target in (("launch.sh.in", "launch.sh"), ("check.sh.in", "check.sh"),
                         ("Dockerfile.in", "Dockerfile"), ("dockerignore", ".dockerignore")):
        texts[target] = render(resource_path("bundle", name).read_text(encoding="utf-8"), values)
    for name, text in texts.items():
        leaked = secrets_in_text(text)
        if leaked:
            raise ExportError(f"{name} would contain {', '.join(leaked)}; remove the token from the config")
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        os.chmod(path, 0o644)  # temporary files are private; a bundle is shared
    os.chmod(out / MANIFEST, 0o644)
    shutil.copyfile(Path(__file__).with_name("check.py"), out / "studio_check.py")
    for script in ("launch.sh", "check.sh", "studio_check.py"):
        os.chmod(out / script, 0o755)


def _with_nodes(config: TrainConfig, nodes: int, per_node: int) -> TrainConfig:
    copy = config.model_copy(deep=True)
    copy.launch = copy.launch.model_copy(
        update={"num_machines": nodes, "num_processes": nodes * per_node, "machine_rank": 0})
    return copy


def zip_bundle(folder: Path) -> Path:
    """`folder.zip` beside the folder, everything under one top folder, script modes kept."""
    target = folder.with_suffix(".zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            arcname = f"{folder.name}/{path.relative_to(folder).as_posix()}"
            archive.write(path, arcname + ("/" if path.is_dir() else ""))
    return target
