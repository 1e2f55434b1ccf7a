"""What the training environment holds: the studio's core, trainer and logging dependencies, pinned.

One source for each: the requirements are pyproject.toml's `dependencies` and its `train`
extra (and `cuda` on an NVIDIA machine), the pins are constraints/ci.txt, the versions
CI tests. The frozen app carries both files (packaging/frozen_layout.py).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studio.core.resources import app_root, resource_path

TORCH = "torch"
PYPROJECT = "pyproject.toml"
CONSTRAINTS = Path("constraints") / "ci.txt"
TORCH_BUILDS = ("trainenv", "torch_builds.toml")


class PackageListError(ValueError):
    """A shipped list of packages is missing or unreadable; the message names the file."""


@dataclass(frozen=True)
class PackageLists:
    requirements: tuple[str, ...]  # torch first, then the rest (pip requirement strings)
    constraints: Path

    @property
    def torch_requirement(self) -> str:
        return next(r for r in self.requirements if requirement_name(r) == TORCH)

    @property
    def others(self) -> tuple[str, ...]:
        return tuple(r for r in self.requirements if requirement_name(r) != TORCH)


def requirement_name(requirement: str) -> str:
    """`torch` for `torch>=2.4`; names are compared normalized (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise PackageListError(f"'{requirement}' is not a package requirement")
    return normalize(match.group(1))


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PackageListError(f"{path} cannot be read: {exc}; reinstall the studio") from None


def training_requirements(root: Path | None = None, nvidia: bool = False) -> tuple[str, ...]:
    """The core's dependencies and the `train` and `logging` extras (plus `cuda` with `nvidia`), torch first:
    output.log_to (TensorBoard, W&B) works in the desktop app's environment without a second install."""
    project = _read_toml((root or app_root()) / PYPROJECT).get("project", {})
    extras = project.get("optional-dependencies", {})
    wanted = [*project.get("dependencies", []), *extras.get("train", []), *extras.get("logging", []),
              *(extras.get("cuda", []) if nvidia else [])]
    if not any(requirement_name(r) == TORCH for r in wanted):
        raise PackageListError(f"{(root or app_root()) / PYPROJECT} lists no torch in its train extra")
    return tuple(sorted(wanted, key=lambda r: requirement_name(r) != TORCH))


def package_lists(root: Path | None = None, nvidia: bool = False) -> PackageLists:
    base = root or app_root()
    constraints = base / CONSTRAINTS
    if not constraints.is_file():
        raise PackageListError(f"{constraints} is missing: the studio cannot pin the training packages; reinstall it")
    return PackageLists(training_requirements(base, nvidia), constraints)


def pinned_versions(constraints: Path) -> dict[str, str]:
    """`name == version` lines of a constraints file, by normalized name."""
    pins: dict[str, str] = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)", line)
        if match:
            pins[normalize(match.group(1))] = match.group(2)
    return pins


def torch_builds_table() -> dict[str, Any]:
    return _read_toml(resource_path(*TORCH_BUILDS))
