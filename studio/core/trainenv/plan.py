"""What an install of the training environment would do on this machine, before it runs.

The plan names the folder, the tool (uv or venv + pip), the torch build the driver
needs, the pinned packages and where they come from (PyPI and PyTorch's index, or a
folder of wheels for an offline install). Its stamp changes when any of that changes,
so an install with nothing changed does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.hardware.machine.probe import load_hardware
from studio.core.hardware.report import HardwareReport
from studio.core.resources import app_root
from studio.core.trainenv.packages import PackageLists, package_lists, requirement_name
from studio.core.trainenv.sources import PipSettings, reachable, read_pip_settings, uv_environment
from studio.core.trainenv.tools import UV, EnvTool, choose_tool
from studio.core.trainenv.torch_build import TorchBuild, choose_torch_build
from studio.core.training_python import env_dir

WHEELHOUSE_VAR = "STUDIO_WHEELHOUSE"
PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class InstallPlan:
    folder: Path
    tool: EnvTool
    build: TorchBuild
    packages: PackageLists
    wheelhouse: Path | None  # install only from this folder of wheels (no network)
    studio_source: Path  # the folder holding the `studio` package the trainer runs
    pip: PipSettings = field(default_factory=PipSettings)  # the person's pip index, mirrors, cert, proxy

    def stamp(self) -> str:
        """Changes when what the environment should hold changes (not where the app lives)."""
        facts = {
            "requirements": list(self.packages.requirements),
            "constraints": self.packages.constraints.read_text(encoding="utf-8"),
            "torch": [self.build.tag, self.build.index_url],
            "wheelhouse": str(self.wheelhouse) if self.wheelhouse else None,
            "tool": self.tool.kind,
        }
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]

    def source_args(self, torch_step: bool) -> list[str]:
        """Where packages come from: the wheel folder; else PyTorch's index for torch, and the person's
        index (pip's index-url, else PyPI) with their extra indexes and wheel folders."""
        if self.wheelhouse is not None:
            return ["--no-index", "--find-links", str(self.wheelhouse)]
        uv = self.tool.kind == UV
        # pip reads its own settings; uv is told them (it reads none of pip's).
        extra = self.pip.uv_source_args() if uv else [
            arg for url in self.pip.extra_index_urls for arg in ("--extra-index-url", url)]
        several = ["--index-strategy", "unsafe-best-match"] if uv else []
        if torch_step and self.build.index_url:
            # The person's index too: PyTorch's index mirrors only some versions of torch's own
            # dependencies, and the pins may name others. Its build (+cu128, +cpu) still wins: a
            # local version sorts above the plain one on PyPI.
            return ["--index-url", self.build.index_url, "--extra-index-url", self.pip.index_url or PYPI,
                    *extra, *several]
        if not uv:
            return extra
        index = ["--index-url", self.pip.index_url] if self.pip.index_url else []
        return [*index, *extra, *(several if extra else [])]

    def torch_index_unreachable(self, environ: Mapping[str, str] | None = None) -> bool:
        """PyTorch's index for this build cannot be reached, and the person has package sources of their own to
        take torch from instead (a mirror or folder of wheels that holds the build). Behind a proxy the host's
        reachability is the proxy's to say, so the index is kept."""
        env = os.environ if environ is None else environ
        proxied = self.pip.proxy or any(env.get(name) for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
                                                                   "http_proxy", "ALL_PROXY", "all_proxy"))
        return bool(self.wheelhouse is None and self.build.index_url and self.pip.has_own_sources and not proxied
                    and not reachable(self.build.index_url))

    def sources(self) -> list[str]:
        """The indexes and folders an install reads, for messages."""
        if self.wheelhouse is not None:
            return [str(self.wheelhouse)]
        return [u for u in (self.build.index_url, self.pip.index_url or PYPI) if u] + \
            list(self.pip.extra_index_urls) + list(self.pip.find_links)

    def tool_environment(self) -> dict[str, str]:
        """Variables for the install's commands: uv gets the system's certificates and pip's cert and proxy."""
        return uv_environment(self.pip) if self.tool.kind == UV and self.wheelhouse is None else {}

    def distribution_names(self) -> list[str]:
        return [requirement_name(r) for r in self.packages.requirements]


def chosen_wheelhouse(wheelhouse: Path | None = None) -> Path | None:
    """The folder of wheels to install from: the argument, else $STUDIO_WHEELHOUSE, else none (the internet)."""
    return wheelhouse or (Path(os.environ[WHEELHOUSE_VAR]) if os.environ.get(WHEELHOUSE_VAR) else None)


def make_plan(
    folder: Path | None = None,
    tool_kind: str | None = None,
    torch_tag: str | None = None,
    wheelhouse: Path | None = None,
    hardware: HardwareReport | None = None,
    packages: PackageLists | None = None,
) -> InstallPlan:
    """The plan for this machine; raises NoEnvTool, PackageListError or ValueError with what to do."""
    report = hardware if hardware is not None else load_hardware()
    build = choose_torch_build(report, tag=torch_tag)
    house = chosen_wheelhouse(wheelhouse)
    if house is not None and not house.is_dir():
        raise ValueError(f"the wheel folder {house} does not exist: give a folder of .whl files")
    return InstallPlan(
        folder=folder or env_dir(),
        tool=choose_tool(tool_kind),
        build=build,
        packages=packages or package_lists(nvidia=build.cuda),
        wheelhouse=house,
        studio_source=app_root(),
        pip=read_pip_settings(),
    )
