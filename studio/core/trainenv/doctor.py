"""What is wrong with the training environment, or would stop its install, and how to fix it.

Each finding names the fault, where it is and the command or action that fixes it:
no NVIDIA driver, a driver too old for every CUDA build, too little disk space, no
Python or uv to build with, a venv whose Python no longer runs, packages missing or
at other versions than the pins, the studio's code not linked, an install left halfway.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from studio.core.app_words import command_or_action
from studio.core.hardware.machine.probe import load_hardware
from studio.core.hardware.report import HardwareReport
from studio.core.resources import app_root
from studio.core.trainenv.installer import is_up_to_date
from studio.core.trainenv.packages import PackageListError, package_lists
from studio.core.trainenv.plan import InstallPlan, chosen_wheelhouse, make_plan
from studio.core.trainenv.state import LOG_FILE, STATE_FILE, EnvCheck, check_env, read_ready
from studio.core.trainenv.tools import NoEnvTool, choose_tool
from studio.core.trainenv.torch_build import TorchBuild, choose_torch_build
from studio.core.trainenv.verify import mismatched_versions
from studio.core.training_python import env_dir, env_python

ERROR, WARNING, INFO = "error", "warning", "info"
def _repair() -> str:
    return command_or_action("run `studio-train env repair` (or Repair in Tools → Training Environment)",
                             "press Repair in Tools → Training Environment")


def _install() -> str:
    return command_or_action("run `studio-train env install` (or Install in Tools → Training Environment)",
                             "press Install in Tools → Training Environment")


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str  # error | warning | info
    message: str  # what is wrong, and where
    fix: str  # what to do

    def describe(self) -> str:
        return f"{self.severity}: {self.message}\n  fix: {self.fix}"


def free_gb(folder: Path) -> float:
    """Free space on the disk that holds `folder` (or would, once made)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return shutil.disk_usage(existing).free / 1e9


def machine_findings(report: HardwareReport, build: TorchBuild, folder: Path, installed: bool,
                     platform: str = sys.platform) -> list[Finding]:
    """Driver and disk: what would stop an install or make training slow."""
    found = []
    if build.problem:
        found.append(Finding("driver_too_old", ERROR, build.problem,
                             "update the NVIDIA driver (nvidia.com/drivers, or your system's driver manager)"
                             + command_or_action(", or install the CPU build with `studio-train env install --torch cpu`",
                                                 ", then press Repair in Tools → Training Environment")))
    if platform != "darwin" and not any(gpu.vendor == "nvidia" for gpu in report.gpus):
        found.append(Finding("no_nvidia_driver", WARNING,
                             "no NVIDIA GPU answered (no NVIDIA driver, or it is not loaded): the environment "
                             "gets the CPU build of PyTorch, and training on the CPU is very slow",
                             "if the machine has an NVIDIA GPU, install its driver, restart, then " + _repair()))
    if platform == "darwin":
        found.append(Finding("no_cuda_on_macos", WARNING,
                             "macOS has no CUDA: the trainer runs on the CPU, not the Mac's GPU, so training here "
                             "is very slow (fine for the demo and small tests)",
                             "train real runs on a machine with an NVIDIA GPU: the Export page makes the run "
                             "a bundle for a remote or rented one"))
    free = free_gb(folder)
    if not installed and free < build.disk_gb:
        found.append(Finding("disk_space", ERROR,
                             f"{free:.1f} GB free on the disk of {folder}; the {build.tag} install needs about "
                             f"{build.disk_gb:.0f} GB",
                             "free some space, or set STUDIO_TRAINING_ENV to a folder on a larger disk"))
    return found


def env_findings(plan: InstallPlan, check: EnvCheck) -> list[Finding]:
    """The environment itself: missing, broken, half-installed, out of date, unlinked."""
    folder = plan.folder
    if not folder.exists():
        return [Finding("not_installed", INFO, f"there is no training environment yet ({folder})", _install())]
    if not check.runs:
        return [Finding("broken_venv", ERROR,
                        f"the environment's Python does not run: {check.error} (the Python it was made from "
                        "was probably removed or upgraded)", _repair() + "; it makes the environment again")]
    ready = read_ready(folder)
    if ready is None:
        if (folder / STATE_FILE).is_file():
            return [Finding("install_unfinished", WARNING,
                            f"the install in {folder} stopped before it finished (cancelled or failed; "
                            f"see {folder / LOG_FILE})", _install() + "; it continues where it stopped")]
        return [Finding("not_installed", INFO, f"{folder} holds no finished training environment", _install())]
    found = []
    if ready.get("stamp") != plan.stamp() and not plan.build.problem:
        found.append(Finding("outdated", WARNING,
                             f"the environment was made for another package list or torch build than this "
                             f"studio's ({ready.get('torch_build')} then, {plan.build.tag} now)", _install()))
    wrong = mismatched_versions(plan, check)
    if wrong:
        found.append(Finding("packages", ERROR, "packages: " + "; ".join(wrong), _repair()))
    studio = Path(check.studio) if check.studio else None
    if studio is None or studio.resolve() != (plan.studio_source / "studio").resolve():
        where = f"it finds {studio}" if studio else "it does not find it"
        found.append(Finding("studio_unlinked", ERROR,
                             f"the environment does not run this studio's code from {plan.studio_source} "
                             f"({where}; the app was moved or updated?)", _repair()))
    return found


def diagnose(report: HardwareReport, folder: Path, torch_tag: str | None = None,
             wheelhouse: Path | None = None, tool_kind: str | None = None) -> list[Finding]:
    """Every finding for this machine and its environment in `folder` (empty: all is well)."""
    try:
        build = choose_torch_build(report, tag=torch_tag)
    except ValueError as exc:
        return [Finding("torch_build", ERROR, str(exc), "name one of the builds listed")]
    installed = read_ready(folder) is not None
    found = machine_findings(report, build, folder, installed)
    try:
        tool = choose_tool(tool_kind)
    except NoEnvTool as exc:
        found.append(Finding("no_python", ERROR, str(exc).split(":", 1)[0],
                             "install uv (https://docs.astral.sh/uv/) or Python 3.11+, then " + _install()))
        return found
    try:
        packages = package_lists(nvidia=build.cuda)
    except PackageListError as exc:
        found.append(Finding("package_lists", ERROR, str(exc), "reinstall the studio"))
        return found
    plan = InstallPlan(folder, tool, build, packages, chosen_wheelhouse(wheelhouse), app_root())
    check = check_env(folder, plan.distribution_names()) if env_python(folder).parent.exists() else EnvCheck(
        error=f"{env_python(folder)} does not exist")
    return found + env_findings(plan, check)


def status_facts(plan: InstallPlan) -> dict[str, object]:
    """What `studio-train env status` shows."""
    check = check_env(plan.folder, plan.distribution_names())
    ready = read_ready(plan.folder) or {}
    return {
        "folder": str(plan.folder),
        "ready": bool(ready) and check.runs,
        "up_to_date": is_up_to_date(plan, check),
        "python": str(env_python(plan.folder)) if check.runs else None,
        "python_version": check.python,
        "torch": check.versions.get("torch"),
        "torch_build_needed": plan.build.tag,
        "torch_build_reason": plan.build.reason,
        "tool": plan.tool.describe(),
        "source": str(plan.wheelhouse) if plan.wheelhouse else (plan.build.index_url or "PyPI"),
        "error": check.error if plan.folder.exists() else None,
    }


@dataclass(frozen=True)
class EnvOverview:
    """Everything the Training Environment window shows, read off the GUI thread."""

    plan: InstallPlan | None  # None when no install is possible (no Python, no package lists)
    findings: list[Finding]
    facts: dict[str, object]

    @property
    def ready(self) -> bool:
        return bool(self.facts.get("ready")) and not self.needs_repair

    @property
    def needs_repair(self) -> bool:
        return any(f.code in ("broken_venv", "packages") for f in self.findings)

    @property
    def blocked(self) -> bool:
        """An install cannot start (no Python, the driver too old, no disk space)."""
        return self.plan is None or any(
            f.code in ("no_python", "driver_too_old", "disk_space", "package_lists") for f in self.findings)


def env_overview(folder: Path | None = None, wheelhouse: Path | None = None) -> EnvOverview:
    """The plan, the findings and the status for this machine (the hardware probe included);
    `wheelhouse`: install from that folder of wheels only."""
    folder = folder or env_dir()
    report = load_hardware()
    findings = diagnose(report, folder, wheelhouse=wheelhouse)
    try:
        plan = make_plan(folder, hardware=report, wheelhouse=wheelhouse)
    except (NoEnvTool, PackageListError, ValueError) as exc:
        return EnvOverview(None, findings, {"folder": str(folder), "error": str(exc)})
    return EnvOverview(plan, findings, status_facts(plan))
