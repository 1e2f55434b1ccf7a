"""The training interpreter asked, before a run starts, whether its torch can use CUDA and whether it has the
trainer's packages: in a subprocess (the window never imports torch), once per install of its torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from studio.core.app_words import command_or_action
from studio.core.console_window import no_window
from studio.core.project.problems import PreflightProblem
from studio.core.training_python import NoTrainingPython, default_training_python, ready_env_python

TORCH_PROBE_TIMEOUT_S = 120
TRAINER_PACKAGES = ("studio", "accelerate", "diffusers", "transformers", "peft", "safetensors")


_TORCH_PROBE_MARK = "STUDIO_TORCH_PROBE "
# Without `-c`'s working folder on the path: a source checkout there would lend its `studio` to the probe,
# which the trainer, started in its run folder, does not see.
_TORCH_PROBE = ("import importlib.util, json, sys; sys.path[:] = [p for p in sys.path if p]; import torch; "
                "missing = [name for name in " + repr(TRAINER_PACKAGES) + " if importlib.util.find_spec(name) is None]; "
                "print(" + repr(_TORCH_PROBE_MARK) + " + json.dumps([str(torch.__version__), "
                "bool(torch.cuda.is_available()), torch.__file__, missing]))")
# What each training interpreter answered, kept while its torch is the same files and nothing was missing:
# pressing Train again does not freeze the window for the seconds an import of torch takes (the probe runs
# in the caller).
_torch_answers: dict[tuple[str, str], tuple[tuple[int, int], str, str, bool]] = {}


def _torch_stamp(interpreter: str, torch_file: str) -> tuple[int, int] | None:
    """When the interpreter and its torch were last written: a reinstall (a CUDA build over a CPU one) asks again."""
    try:
        found = shutil.which(interpreter) or interpreter
        return Path(found).stat().st_mtime_ns, Path(torch_file).stat().st_mtime_ns
    except (OSError, TypeError):
        return None


def _torch_probe(interpreter: str) -> tuple[str, bool, list[str]] | None:
    """(torch's version, whether it can use CUDA, the trainer's packages it lacks) in `interpreter`, or None
    when it has no torch."""
    key = (interpreter, os.environ.get("PYTHONPATH", ""))
    cached = _torch_answers.get(key)
    if cached is not None and _torch_stamp(interpreter, cached[1]) == cached[0]:
        return cached[2], cached[3], []
    out = subprocess.run([interpreter, "-c", _TORCH_PROBE], capture_output=True, text=True,
                         timeout=TORCH_PROBE_TIMEOUT_S, creationflags=no_window())
    lines = [line for line in out.stdout.splitlines() if line.startswith(_TORCH_PROBE_MARK)]
    if out.returncode != 0 or not lines:
        return None
    try:
        version, available, torch_file, missing = json.loads(lines[-1][len(_TORCH_PROBE_MARK):])
    except ValueError:
        return None
    stamp = _torch_stamp(interpreter, torch_file)
    if stamp is not None and not missing:  # a package installed later is found at the next press
        _torch_answers[key] = (stamp, torch_file, str(version), bool(available))
    return str(version), bool(available), [str(name) for name in missing]


def check_torch_cuda(python: str | None) -> PreflightProblem | None:
    """The training interpreter's torch can use CUDA, and it has the trainer's code and libraries (asked in a
    subprocess: the caller never imports torch)."""
    try:
        # Never sys.executable: in the desktop app that is the window's binary, not a Python.
        interpreter = python or default_training_python()
    except NoTrainingPython as exc:
        return PreflightProblem("torch", f"No training environment: {exc}.")
    try:
        answer = _torch_probe(interpreter)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return PreflightProblem("torch", f"The training interpreter {interpreter} cannot be started ({exc}): set "
                                         "launch.python to a Python with the studio's training packages.")
    own = _own_environment(python, interpreter)
    if answer is None:
        fix = own or "install the studio's training packages there (pip install 'sd-training-studio[train]')"
        return PreflightProblem("torch", f"The training interpreter {interpreter} has no torch: {fix}.")
    version, available, missing = answer
    if not available:
        fix = own or "install a CUDA build of torch (see pytorch.org)"
        return PreflightProblem("torch", f"torch {version} in {interpreter} cannot use the GPU (a build without "
                                         f"CUDA): {fix}, or set launch.cpu = true to train on the CPU.")
    if missing:
        # A Python of another program (a ComfyUI or kohya environment) has torch, but the trainer started there
        # ended at once with "No module named 'studio'" and a suggestion to resume.
        fix = own or "install the studio's training packages there (pip install 'sd-training-studio[train]')"
        instead = ", or remove launch.python to train with the studio's own" if python else ""
        return PreflightProblem("torch", f"The training interpreter {interpreter} lacks {', '.join(missing)}, "
                                         f"which the trainer needs: {fix}{instead}.")
    return None


def _own_environment(python: str | None, interpreter: str) -> str:
    """The fix for the training environment the studio set up, when that is the interpreter: its Repair (the
    desktop app's environment has no pip a person would know to use, and Repair installs the torch build this
    machine needs); "" for any other Python."""
    own = ready_env_python()
    if python or own is None or Path(interpreter) != own:
        return ""
    return command_or_action("repair the training environment (`studio-train env repair`, or Repair in Tools → "
                             "Training Environment)", "press Repair in Tools → Training Environment")
