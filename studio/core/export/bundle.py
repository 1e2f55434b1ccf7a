"""The remote-run bundle: a folder (or zip) that trains a config on a rented multi-GPU machine.

`export_bundle` writes config.toml with paths relative to the bundle, the accelerate
configs, launch.sh / check.sh, pinned requirements, a Dockerfile, the dataset (the files
the trainer reads, or their manifest), a source copy of the trainer and a README for the
person on the remote side.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import stat
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio import __version__
from studio.core.config.files.toml_file import dump_resolved
from studio.core.config.schema import TrainConfig
from studio.core.estimate.memory_data import denoiser_entry, load_architecture
from studio.core.export.bundle_files import (
    Progress,
    copy_studio_source,
    copy_tree,
    folder_size,
    installed_version,
    pinned_requirements,
    secrets_in_text,
)
from studio.core.export.bundle_plan import (
    DATASET_DIR,
    MANIFEST,
    RUNS_DIR,
    BundlePlan,
    ExportError,
    is_hub_id,
    scale_steps,
    validate_bundle,
)
from studio.core.export.check import human_size
from studio.core.export.dataset_selection import build_manifest
from studio.core.export.gpu_catalogue import load_catalogue
from studio.core.export.sky_task import (
    SKY_FILE,
    CloudOptions,
    accelerators,
    cluster_name,
    dump_sky_yaml,
    hourly_cost,
    sky_task,
)
from studio.core.export.templates import readme_text, render
from studio.core.families import family
from studio.core.files import atomic_write_text
from studio.core.models.known import known_gated
from studio.core.resources import resource_path
from studio.core.runs.launch import accelerate_config, dump_yaml

__all__ = ["BundleReport", "ExportCancelled", "ExportError", "export_bundle", "is_hub_id", "scale_steps", "zip_bundle"]

BUNDLE_FILE = "bundle.json"
SOURCE_DIR = "src"
REMOTE_COMMAND = "./launch.sh --check"
SCRIPTS = ("launch.sh", "check.sh", "studio_check.py")  # executable on the remote machine


class ExportCancelled(ExportError):
    """The person cancelled the export (or closed the window during it); what it wrote is removed."""

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
    skipped: list[str] = field(default_factory=list)  # dataset files left out: "path: why"
    # Each folder under the bundle's dataset/ -> the folder here its files come from (a remote start reads them there).
    dataset_roots: dict[str, Path] = field(default_factory=dict)

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


def _disk_needed_mb(config: TrainConfig, base_kind: str) -> int:
    """Rough: the denoiser's parameters from the family's architecture sizes, a hub base's download from its
    declaration."""
    spec, keep = family(config.model.family), config.output.keep_last + 1
    params = float(denoiser_entry(load_architecture(spec.architecture(config.model.base)))["params"])
    if config.method.kind == "dreambooth":
        checkpoint, output = params * 4 * 3, params * 2 + 1.5e9
    else:
        checkpoint, output = 3e8, 2e8
    download = spec.download_gb_of(config.model.base) * 1e9 if base_kind == "hub" else 0
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
    cloud: CloudOptions | None = None,
    cancel: Callable[[], bool] | None = None,
) -> BundleReport:
    """Write a bundle for `gpus` per node x `nodes`; see the module docstring.

    Four steps: validate (every refusal before anything is written), stage (dataset, model
    and source copied in), write (config, scripts, bundle.json, README), zip. `cancel()` true
    stops it at its next file (ExportCancelled) and removes what it wrote.
    """
    problems = cloud.problems() if cloud is not None else []
    if problems:
        raise ExportError("; ".join(problems))
    plan = validate_bundle(config_path, out_dir, gpus, nodes, gpu_type, include_dataset, remote_base,
                           include_model, remote_dataset, main_address, port, keep_steps)
    if cloud is not None:
        plan.cloud = cloud
        if cloud.spot and not cloud.bucket:
            plan.warnings.append("spot machines without a bucket: a preempted machine takes its checkpoints "
                                 "with it, so the run starts again from step 0; name a bucket to resume instead")
    existed = plan.out.exists()  # empty then: validate_bundle refuses a folder with anything in it
    steps = _stopping(progress, cancel)
    try:
        manifest = stage_bundle(plan, steps)
        report = write_bundle(plan, manifest)
    except BaseException:
        # A half bundle (a full disk, Ctrl+C) is no bundle, and its half copy of the dataset, without the
        # bundle.json that marks it, was read as training images when it sat in the project's image folder.
        _remove_written(plan.out, existed)
        raise
    if zip:
        try:
            report.zip_path = zip_bundle(plan.out, steps)
        except ExportCancelled:  # cancelled, not cut short: nothing of it is kept
            _remove_written(plan.out, existed)
            raise
    if progress:
        progress("done", 1, 1)
    return report


def _stopping(progress: Progress | None, cancel: Callable[[], bool] | None) -> Progress | None:
    """`progress`, raising ExportCancelled at a report once `cancel()` is true (each file copied or zipped)."""
    if cancel is None:
        return progress

    def report(message: str, done: int, total: int) -> None:
        if cancel():
            raise ExportCancelled("the export was cancelled; what it had written is removed")
        if progress:
            progress(message, done, total)

    return report


def _remove_written(out: Path, existed: bool) -> None:
    """What an export wrote into `out` (all of it: the folder was new or empty)."""
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in list(out.iterdir()) if out.is_dir() else []:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def stage_bundle(plan: BundlePlan, progress: Progress | None = None) -> dict[str, Any]:
    """Create the bundle folder and copy the dataset (or list it), the model files and the studio's source."""
    out = plan.out
    out.mkdir(parents=True, exist_ok=True)
    (out / DATASET_DIR).mkdir()
    (out / RUNS_DIR).mkdir()
    manifest = build_manifest(plan.datasets, out / DATASET_DIR if plan.include_dataset else None, progress)
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    for number, (src, dest) in enumerate(plan.copies, start=1):
        if progress:
            progress(f"model {src.name}", number, len(plan.copies))
        copy_tree(src, dest)
    if progress:
        progress("studio source", 0, 1)
    copy_studio_source(out / SOURCE_DIR)
    return manifest


def write_bundle(plan: BundlePlan, manifest: dict[str, Any]) -> BundleReport:
    """Write config.toml, the accelerate configs, scripts, bundle.json and README; the report."""
    bundle, gpu, t = plan.bundle, plan.gpu, plan.bundle.training
    effective_batch = t.effective_batch(plan.processes)
    info: dict[str, Any] = {
        "studio_version": __version__,
        "exported": _dt.datetime.now().isoformat(timespec="seconds"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "gpu_type": gpu.name if gpu else None,
        "gpus_per_node": plan.gpus, "nodes": plan.nodes, "num_processes": plan.processes,
        "vram_estimate_mb": plan.vram,
        "disk_needed_mb": _disk_needed_mb(bundle, plan.base_kind),
        "base_model": {"kind": plan.base_kind, "value": bundle.model.base,
                       # A hub base the studio knows to be gated: check.sh there wants a token.
                       **({"gated": known_gated(str(bundle.model.base))} if plan.base_kind == "hub" else {})},
        "dataset": {"included": plan.include_dataset, "root": plan.data_root, "manifest": MANIFEST,
                    "files": len(manifest["files"]), "bytes": manifest["total_bytes"],
                    "skipped": len(manifest["skipped"])},
        "steps": {"original": plan.original_steps, "bundle": t.max_steps, "epochs": t.epochs},
        "effective_batch": effective_batch,
        "learning_rate": t.learning_rate,
    }
    info["cloud"] = _cloud_info(plan, manifest["total_bytes"])
    _write_files(plan.out, bundle, info, plan.config_path)
    all_files = [p for p in plan.out.rglob("*") if p.is_file()]
    return BundleReport(
        out_dir=plan.out, zip_path=None, files=len(all_files), bytes=sum(p.stat().st_size for p in all_files),
        dataset_files=len(manifest["files"]), dataset_bytes=manifest["total_bytes"],
        dataset_included=plan.include_dataset, base_model=str(bundle.model.base), base_kind=plan.base_kind,
        gpus_per_node=plan.gpus, nodes=plan.nodes, gpu_type=gpu.name if gpu else None, steps=t.max_steps,
        original_steps=plan.original_steps, effective_batch=effective_batch, vram_estimate_mb=plan.vram,
        warnings=plan.warnings, skipped=[f"{s['path']}: {s['reason']}" for s in manifest["skipped"]],
        dataset_roots={s.name: s.root for s in plan.datasets},
    )


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
        "requirements.txt": pinned_requirements(bundle.training.optimizer, bundle.model.quantized_base),
        BUNDLE_FILE: json.dumps(info, indent=1) + "\n",
        "README.md": readme_text(bundle, info, out.name),
        SKY_FILE: dump_sky_yaml(info["cloud"]["task"], header=(
            f"SkyPilot task for {bundle.output.name}: sky launch -c {info['cloud']['cluster']} {SKY_FILE}\n"
            "Exported by SD Training Studio; see README.md (Run on a cloud).")),
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
    for script in SCRIPTS:
        os.chmod(out / script, 0o755)


def _cloud_info(plan: BundlePlan, dataset_bytes: int) -> dict[str, Any]:
    """The SkyPilot task and what it costs per hour, for sky.yaml and the README."""
    catalogue = load_catalogue()
    wanted = accelerators(plan.gpu, plan.gpus, catalogue, plan.vram)
    info = {"gpus_per_node": plan.gpus, "nodes": plan.nodes,
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "disk_needed_mb": _disk_needed_mb(plan.bundle, plan.base_kind),
            "dataset": {"bytes": dataset_bytes},
            # The model files the bundle carries sit on the cluster's disk too (a local base model of 50 GB
            # asked for the same 100 GB disk as a hub id, and the copy there ran out of room).
            "model_bytes": sum(folder_size(src) for src, _dest in plan.copies)}
    cost = hourly_cost(plan.gpu, plan.gpus, plan.nodes, catalogue, wanted)
    return {
        "task": sky_task(plan.bundle.output.name, info, wanted, plan.cloud),
        "cluster": cluster_name(plan.bundle.output.name),
        "accelerators": wanted,
        "per_hour": None if cost is None else {"min": round(cost[0], 2), "max": round(cost[1], 2),
                                               "gpu": cost[2], "currency": catalogue.currency},
        "spot": plan.cloud.spot, "bucket": plan.cloud.bucket,
    }


def _with_nodes(config: TrainConfig, nodes: int, per_node: int) -> TrainConfig:
    copy = config.model_copy(deep=True)
    copy.launch = copy.launch.model_copy(
        update={"num_machines": nodes, "num_processes": nodes * per_node, "machine_rank": 0})
    return copy


def zip_bundle(folder: Path, progress: Progress | None = None) -> Path:
    """`folder.zip` beside the folder, everything under one top folder, the scripts executable; `progress`
    is told each file (a dataset of 20,000 images takes minutes).

    The modes are written as Unix modes whatever this computer's file system holds: a zip made on Windows
    (no executable bit, entries marked as MS-DOS ones) unpacked on Linux with scripts that `./launch.sh`
    could not run ("Permission denied")."""
    target = folder.with_name(f"{folder.name}.zip")  # not with_suffix: flux-v1.5 is not flux-v1 + .5
    # Written beside it and renamed when whole: a zip cut short (Ctrl+C in the minutes a dataset takes, a full
    # disk) left FOLDER.zip looking finished, to be uploaded and fail to unpack on the rented machine.
    part = folder.with_name(f"{folder.name}.zip.part")
    try:
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as archive:
            paths = sorted(folder.rglob("*"))
            for done, path in enumerate(paths, start=1):
                if progress:
                    progress("zip", done, len(paths))
                rel = path.relative_to(folder).as_posix()
                info = zipfile.ZipInfo.from_file(path, f"{folder.name}/{rel}")
                info.create_system = 3  # Unix: unzip and Python's zipfile read the modes below
                if path.is_dir():
                    info.external_attr = ((stat.S_IFDIR | 0o755) << 16) | 0x10
                    archive.writestr(info, b"")
                    continue
                info.external_attr = (stat.S_IFREG | (0o755 if rel in SCRIPTS else 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(path, "rb") as source, archive.open(info, "w", force_zip64=True) as out:
                    shutil.copyfileobj(source, out, 1 << 20)
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return target
