"""The accelerate config and command line of a run: what the GUI, the CLI and bundles start."""

from __future__ import annotations

import datetime as _dt
import errno
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studio.core.config.files.paths import ResolvedConfig
from studio.core.config.files.toml_file import dump_resolved
from studio.core.config.rules.sharding import accelerate_fsdp_config
from studio.core.config.schema import TrainConfig
from studio.core.files import atomic_write_text
from studio.core.quoting import command_line, yaml_scalar
from studio.core.runs.folders import (
    ACCELERATE_FILE,
    COMMAND_FILE,
    CONFIG_FILE,
    CONSOLE_FILE,
    LAUNCHED_ENV,
    new_run_dir,
)
from studio.core.runs.records.outcome import STUDIO_PREFIX
from studio.core.training_python import default_training_python


def accelerate_config(config: TrainConfig, num_processes: int | None = None) -> dict[str, Any]:
    """The accelerate config file's content for a run."""
    launch = config.launch
    processes = num_processes or launch.num_processes
    multi = processes > 1
    fsdp = multi and launch.strategy == "fsdp"
    data: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP" if fsdp else "MULTI_GPU" if multi else "NO",
        "num_processes": processes,
        "num_machines": launch.num_machines,
        "machine_rank": launch.machine_rank,
        "mixed_precision": config.training.mixed_precision,
        "gpu_ids": launch.gpu_ids,
        # Several processes are always launched as MULTI_GPU: on a machine without GPUs (or with
        # launch.cpu) the trainer's Accelerator falls back to the CPU and the ranks join over gloo.
        # accelerate's own use_cpu would start a single process instead.
        "use_cpu": launch.cpu and not multi,
        "main_training_function": "main",
        "rdzv_backend": "static",
        "same_network": True,
        "downcast_bf16": "no",
        "debug": False,
    }
    if launch.num_machines > 1 or multi:
        data["main_process_ip"] = launch.main_process_ip
        data["main_process_port"] = launch.main_process_port
    if fsdp:
        # The trainer applies FSDP2 to the modules itself, on GPUs and on CPU ranks alike
        # (studio/train/memory/sharding.py); these fields say what it does, and `accelerate launch`
        # starts the processes as for any multi-GPU run.
        data["fsdp_config"] = accelerate_fsdp_config(config)
    return data


def dump_yaml(data: dict[str, Any]) -> str:
    """accelerate's YAML: scalars, and tables of scalars (fsdp_config) one level deep.

    Values come from the config and the command line (main_process_ip from a node's environment):
    each is a quoted scalar, and one that YAML could not hold on its line (a line break would start
    a key of its own) is refused, naming the key (UnsafeNameError, a ValueError)."""
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines.extend(f"  {k}: {yaml_scalar(f'{key}.{k}', v)}" for k, v in value.items())
        else:
            lines.append(f"{key}: {yaml_scalar(key, value)}")
    return "\n".join(lines) + "\n"


# `accelerate launch` with the same arguments, leaving without the 1-3 s teardown of torch.
LAUNCHER = "studio.train.launcher"


def training_python(config: TrainConfig) -> str:
    """The interpreter of the training environment: launch.python, else the studio's default.

    The default is the training environment the studio set up, once it is complete (see
    `studio.core.training_python`); raises NoTrainingPython in the frozen app before that.
    """
    return config.launch.python or default_training_python()


def python_problem(config: TrainConfig) -> str | None:
    """Why launch.python cannot start a trainer (missing, not a program), or None when it can."""
    python = config.launch.python
    if not python:
        return None
    found = shutil.which(python) if os.sep not in python and "/" not in python else python
    reason = None
    if found is None or not Path(found).exists():
        reason = "no such file"
    elif Path(found).is_dir():
        reason = "it is a folder"
    elif not os.access(found, os.X_OK):
        reason = "it is not executable"
    if reason is None:
        return None
    example = r"C:\path\to\venv\Scripts\python.exe" if os.name == "nt" else "/path/to/venv/bin/python"
    return (f'launch.python = "{python}" cannot be started ({reason}); set it to the python of the training '
            f"environment (e.g. {example}), or remove it to train with the studio's own")


def build_command(run_dir: str | Path, python: str, resume: bool = False) -> list[str]:
    """`accelerate launch --config_file RUN_DIR/accelerate.yaml -m studio.train RUN_DIR/config.toml`,
    through `studio.train.launcher`: accelerate's launcher that exits as soon as the trainer does.

    With `resume`, the trainer gets `--resume RUN_DIR` and continues from the newest checkpoint.
    """
    run = Path(run_dir)
    target = ["--resume", str(run)] if resume else [str(run / CONFIG_FILE)]
    return [
        python,
        "-m",
        LAUNCHER,
        "--config_file",
        str(run / ACCELERATE_FILE),
        "-m",
        "studio.train",
        *target,
    ]


def launch_as_configured(config: TrainConfig, run_dir: Path) -> list[str]:
    """Before a resume: RUN_DIR/accelerate.yaml (what `accelerate launch` reads: the number of processes, the
    GPUs) made again from the run's config.toml, so that launch.num_processes or launch.gpu_ids edited there
    since is how the run goes on; it went on as before without a word. What changed, "key: then -> now", each.
    Raises OSError when the file cannot be written, UnsafeNameError for a value YAML cannot hold."""
    path = run_dir / ACCELERATE_FILE
    before = path.read_text(encoding="utf-8") if path.is_file() else ""
    old = dict(line.split(": ", 1) for line in before.splitlines() if ": " in line and not line.startswith(" "))
    data = accelerate_config(config)
    default_port = type(config.launch).model_fields["main_process_port"].default
    if "main_process_port" in data and "main_process_port" not in old and data["main_process_port"] == default_port:
        # A single-process run edited to several: as at a first launch, two local runs on the default port
        # would hang at the rendezvous, and any free port does on one machine.
        data["main_process_port"] = free_port()
    text = dump_yaml(data)
    if text == before:
        return []
    new = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line and not line.startswith(" "))
    atomic_write_text(path, text)
    return [f"{key}: {old.get(key, '(none)')} -> {new.get(key, '(none)')}" for key in {**old, **new}
            if old.get(key) != new.get(key) and key != "main_process_port"]


def training_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a training process: unbuffered output so every line shows at once, and CUDA's GPU
    numbers those the studio shows (nvidia-smi's, in PCI bus order) unless the person chose an order."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    # CUDA numbers the fastest GPU 0 by default: with an RTX 3060 in the first slot and a 4090 in the second,
    # launch.gpu_ids = "1" (the 4090 on the Model page) would train on the 3060, and a one-GPU run on GPU 0
    # (the card the estimate is compared with) would train on the 4090.
    env.setdefault("CUDA_DEVICE_ORDER", os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID"))
    env[LAUNCHED_ENV] = repr(time.time())  # made at the launch: see StopRequest.clear_stale
    return env


def planned_run_dir(resolved: ResolvedConfig, now: _dt.datetime | None = None) -> Path:
    """The folder `prepare_run` would create now (nothing is written)."""
    stamp = (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return Path(resolved.output.dir) / f"{stamp}-{resolved.output.name}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def format_command(command: list[str]) -> str:
    return command_line(command)


class RunFolderError(OSError):
    """A run folder cannot be made or written; the message says where, why and what to do."""


def _folder_error(exc: OSError, output_dir: str) -> RunFolderError:
    advice = {
        errno.ENOSPC: "the disk is full: free space on it or set output.dir to a folder on another disk",
        errno.EDQUOT: "your disk quota is used up: free space or set output.dir to another disk",
        errno.EROFS: "the disk is read-only: set output.dir to a folder you can write to",
        errno.EACCES: "make the folder writable for your user or set output.dir to a folder you can write to",
        errno.EPERM: "make the folder writable for your user or set output.dir to a folder you can write to",
        errno.ENAMETOOLONG: "shorten output.name or output.dir",
        errno.ENOTDIR: "a part of output.dir is a file, not a folder: fix output.dir",
    }.get(exc.errno or 0, "check output.dir in the config")
    where = f" ({exc.filename})" if exc.filename else ""
    error = RunFolderError(f"cannot write the run folder under {output_dir}: {exc.strerror or exc}{where}; {advice}")
    error.errno = exc.errno  # str() stays the sentence above
    return error


@dataclass(frozen=True)
class RunPlan:
    run_dir: Path
    command: list[str]
    config: ResolvedConfig
    note: str = ""  # what the studio chose for the run at its start (training.fill_card), for its console


def prepare_run(
    config: ResolvedConfig,
    num_processes: int | None = None,
    run_dir: str | Path | None = None,
    note: str = "",
) -> RunPlan:
    """Write a new run folder (resolved config.toml, accelerate.yaml, command.txt) for `config`, whose
    paths `resolve_paths` made absolute against the config file's folder.
    `note` (what the studio chose for the run, `filled_for_launch`) begins the run's console.log.
    Raises RunFolderError (an OSError) naming the folder and what to do when it cannot be written.
    """
    resolved = config.model_copy(deep=True)  # the launch settings below are the run's, not the caller's
    if num_processes:
        resolved.launch.num_processes = num_processes
    launch = resolved.launch
    if launch.num_processes > 1 and launch.num_machines == 1 and "main_process_port" not in launch.model_fields_set:
        # Two local runs (or a run and anything else) on the default port would hang at the
        # rendezvous; on one machine any free port does.
        launch.main_process_port = free_port()
    accelerate_yaml = dump_yaml(accelerate_config(resolved))  # a value YAML cannot hold is refused before any folder
    folder: Path | None = None
    try:
        folder = Path(run_dir) if run_dir else new_run_dir(resolved.output.dir, resolved.output.name)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / CONFIG_FILE, dump_resolved(resolved))
        atomic_write_text(folder / ACCELERATE_FILE, accelerate_yaml)
        command = build_command(folder, training_python(resolved))
        atomic_write_text(folder / COMMAND_FILE, format_command(command) + "\n")
        if note:
            atomic_write_text(folder / CONSOLE_FILE, "".join(f"{STUDIO_PREFIX} {line}\n" for line in note.splitlines()))
    except OSError as exc:
        if folder is not None and not run_dir:
            shutil.rmtree(folder, ignore_errors=True)  # no half-written run folder in the list of runs
        raise _folder_error(exc, resolved.output.dir) from None
    return RunPlan(folder, command, resolved, note)
