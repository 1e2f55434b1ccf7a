"""Does the environment hold what the plan pins? Versions from package metadata (fast), and
one real import of torch at the end of an install (the CUDA libraries load, the GPU answers)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.trainenv.packages import TORCH, pinned_versions, requirement_name
from studio.core.trainenv.state import EnvCheck

if TYPE_CHECKING:
    from studio.core.trainenv.plan import InstallPlan

_VERIFY_SCRIPT = """
import json, torch
cuda = getattr(torch, "cuda", None)
available = bool(cuda and cuda.is_available())
print("STUDIO_ENV_VERIFY " + json.dumps({
    "torch": str(torch.__version__), "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None),
    "cuda_available": available, "gpus": cuda.device_count() if available else 0}))
"""


def verify_command(python: Path) -> list[str]:
    return [str(python), "-I", "-c", _VERIFY_SCRIPT]


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def local_tag(version: str | None) -> str | None:
    """`cu128` for `2.13.0+cu128`."""
    return version.split("+", 1)[1] if version and "+" in version else None


def mismatched_versions(plan: InstallPlan, check: EnvCheck) -> list[str]:
    """What is missing or not at its pinned version, in words (empty when all is well)."""
    pins = pinned_versions(plan.packages.constraints)
    wrong = []
    for requirement in plan.packages.requirements:
        name = requirement_name(requirement)
        installed = check.versions.get(name)
        if installed is None:
            wrong.append(f"{name} is not installed")
        elif name in pins and _public(installed) != _public(pins[name]):
            wrong.append(f"{name} is {installed}, the studio needs {pins[name]}")
    tag = local_tag(check.versions.get(TORCH))
    if tag and plan.build.tag != "default" and not plan.build.problem and re.fullmatch(r"cu\d+|cpu|rocm[\d.]+", tag) and tag != plan.build.tag:
        wrong.append(f"torch is the {tag} build, this machine needs the {plan.build.tag} build ({plan.build.reason})")
    return wrong
