"""The bundle's SkyPilot task (`sky.yaml`): the same run, launched on whichever cloud is cheapest.

SkyPilot reads the resources (GPU type and count per node, nodes, disk), syncs the bundle as
its workdir, runs `setup` once per node and `run` on every node with SKYPILOT_NODE_RANK,
SKYPILOT_NODE_IPS and SKYPILOT_NUM_GPUS_PER_NODE set; the run command hands those to the
bundle's own launch.sh, so a SkyPilot run trains exactly what `./launch.sh --check` trains by
hand. `autostop` ends the cluster when it has been idle after the run, so a finished run stops
costing money. With spot machines the run resumes from its newest checkpoint after a
preemption (launch.sh with STUDIO_RESUME_NEWEST=1), which needs the run folders on a bucket
that outlives the machine.

The file is written as block YAML by a small emitter here (the core has no YAML library);
`tests/core/export` reads it back with SkyPilot's own loader.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from studio.core.export.gpu_catalogue import Catalogue, GpuType

SKY_FILE = "sky.yaml"
OUTPUTS_MOUNT = "/studio-outputs"
# SkyPilot's default disk is 256 GB; a bundle asks for what it needs with room, at least this.
MIN_DISK_GB = 100


@dataclass(frozen=True)
class CloudOptions:
    """What the person chose for the cloud: spot machines, a bucket for the runs, idle minutes before autostop."""

    spot: bool = False
    bucket: str | None = None  # e.g. "s3://my-bucket/studio" or "gs://..."; None: bring results back by rsync
    autostop_minutes: int = 10

    def problems(self) -> list[str]:
        out = []
        if self.bucket is not None and not re.fullmatch(r"(s3|gs|r2|az|cos|oci|nebius)://[A-Za-z0-9._\-/]+",
                                                        self.bucket):
            out.append(f"bucket '{self.bucket}' is not a bucket address such as s3://my-bucket/studio "
                       "(letters, digits, '.', '-', '_' and '/' after the scheme)")
        if self.autostop_minutes < 1:
            out.append(f"autostop after {self.autostop_minutes} idle minutes: give 1 or more")
        return out


def accelerators(gpu: GpuType | None, per_node: int, catalogue: Catalogue,
                 vram_needed_mb: int | None) -> str | dict[str, int]:
    """`H100:8` for a chosen GPU; else every catalogue GPU that fits, and SkyPilot takes the cheapest."""
    if gpu is not None and gpu.sky:
        return f"{gpu.sky}:{per_node}"
    fitting: dict[str, int] = {}
    for candidate in sorted(catalogue.gpus, key=lambda g: g.price_mid):
        if not candidate.sky or per_node > candidate.max_per_node:
            continue
        if vram_needed_mb is not None and vram_needed_mb > candidate.vram_mb:
            continue
        fitting.setdefault(candidate.sky, per_node)
    if not fitting:
        largest = max(catalogue.gpus, key=lambda g: g.vram_gb)
        return f"{largest.sky}:{per_node}"
    return fitting


def disk_gb(info: dict[str, Any]) -> int:
    """The bundle's disk need (checkpoints, outputs, a hub download, the dataset, the model files it carries)
    with room, in GB."""
    needed_mb = (int(info.get("disk_needed_mb") or 0) + int(info["dataset"]["bytes"]) // 2**20
                 + int(info.get("model_bytes") or 0) // 2**20)
    return max(MIN_DISK_GB, -(-needed_mb * 3 // 2 // 1024))


def sky_task(name: str, info: dict[str, Any], resources_accelerators: str | dict[str, int],
             options: CloudOptions) -> dict[str, Any]:
    """The task as a mapping, in SkyPilot's task schema."""
    resources: dict[str, Any] = {
        "accelerators": resources_accelerators,
        "disk_size": disk_gb(info),
        "use_spot": options.spot,
        "autostop": {"idle_minutes": options.autostop_minutes, "down": True},
    }
    envs: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if options.spot:
        envs["STUDIO_RESUME_NEWEST"] = "1"
    task: dict[str, Any] = {
        "name": _task_name(name),
        "resources": resources,
        "num_nodes": int(info["nodes"]),
        "workdir": ".",
        "envs": envs,
    }
    if options.bucket:
        task["file_mounts"] = {OUTPUTS_MOUNT: {"source": options.bucket, "mode": "MOUNT"}}
    task["setup"] = setup_script(str(info.get("python") or DEFAULT_PYTHON))
    task["run"] = RUN_WITH_BUCKET if options.bucket else RUN
    return task


DEFAULT_PYTHON = "3.11"  # the oldest Python the studio runs on
# The bundle's own environment on every node, apart from the image's Python and SkyPilot's.
ENV_DIR = "$HOME/studio-env"


def setup_script(python: str) -> str:
    """Install requirements.txt into an environment with `python` (the exporting Python's version).

    A cloud image's python3 is often older than the studio needs (3.10 on Ubuntu 22.04 images, where the
    pinned packages do not install and check.sh fails), may lack python3-venv, and its user may have no
    sudo: uv makes the environment with that Python (fetched when the image has none) as the user."""
    return f"""\
set -e
export PATH="$HOME/.local/bin:$PATH"
command -v uv >/dev/null 2>&1 || curl -LsSf https://astral.sh/uv/install.sh | sh
uv venv --allow-existing --seed --python {python} "{ENV_DIR}"
uv pip install --python "{ENV_DIR}/bin/python" -r requirements.txt
"""


_RUN_CORE = f"""\
export PYTHON="{ENV_DIR}/bin/python"
export NUM_MACHINES="$SKYPILOT_NUM_NODES"
export MACHINE_RANK="$SKYPILOT_NODE_RANK"
export GPUS_PER_NODE="$SKYPILOT_NUM_GPUS_PER_NODE"
export MAIN_PROCESS_IP="$(echo "$SKYPILOT_NODE_IPS" | head -n 1)"
./launch.sh --check
"""

RUN = "set -e\n" + _RUN_CORE

# The runs folder on the bucket: checkpoints outlive a preempted machine, results need no copying back.
# Each launch has a folder of its own there (a managed spot job keeps its task id when it starts again), so
# the studio follows, resumes and brings back this launch's run, never an earlier launch's on the same bucket.
RUN_WITH_BUCKET = f"""\
set -e
OUTPUTS="{OUTPUTS_MOUNT}/runs/${{SKYPILOT_TASK_ID:-studio}}"
mkdir -p "$OUTPUTS"
if [ -d runs ] && [ ! -L runs ]; then rmdir runs 2>/dev/null || mv runs runs.local; fi
ln -sfn "$OUTPUTS" runs
""" + _RUN_CORE


def _task_name(name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    return ("studio-" + slug)[:60].rstrip("-") or "studio-run"


def cluster_name(name: str) -> str:
    """A cluster name SkyPilot accepts (lower case letters, digits and '-', starting with a letter)."""
    return _task_name(name)


def dump_sky_yaml(task: dict[str, Any], header: str = "") -> str:
    """Block YAML for the task: mappings, scalars, and `|` blocks for the shell scripts."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _emit(task, 0, lines)
    return "\n".join(lines) + "\n"


def _emit(mapping: dict[str, Any], indent: int, lines: list[str]) -> None:
    pad = "  " * indent
    for key, value in mapping.items():
        label = _scalar(key)
        if isinstance(value, dict):
            if not value:
                lines.append(f"{pad}{label}: {{}}")
                continue
            lines.append(f"{pad}{label}:")
            _emit(value, indent + 1, lines)
        elif isinstance(value, str) and "\n" in value:
            lines.append(f"{pad}{label}: |")
            lines.extend(f"{pad}  {line}" if line else "" for line in value.rstrip("\n").split("\n"))
        else:
            lines.append(f"{pad}{label}: {_scalar(value)}")


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    # A plain scalar only where YAML cannot read it as anything but this string.
    if re.fullmatch(r"[A-Za-z_./][A-Za-z0-9_./:\-]*", text) and text.lower() not in (
            "true", "false", "yes", "no", "on", "off", "null", "~") and ": " not in text:
        return text
    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar


def hourly_cost(gpu: GpuType | None, per_node: int, nodes: int, catalogue: Catalogue,
                resources_accelerators: str | dict[str, int]) -> tuple[float, float, str] | None:
    """What the machines cost per hour (min, max, GPU name) by the catalogue; None when unknown."""
    chosen = gpu
    if chosen is None and isinstance(resources_accelerators, dict):
        names = set(resources_accelerators)
        candidates = [g for g in catalogue.gpus if g.sky in names]
        chosen = min(candidates, key=lambda g: g.price_mid) if candidates else None
    if chosen is None:
        return None
    gpus = per_node * nodes
    return gpus * chosen.price_min, gpus * chosen.price_max, chosen.name
