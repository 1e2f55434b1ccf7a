"""Install the training environment step by step, with progress; cancellable and resumable.

Steps: make the venv, install torch (from the index of the build the driver needs),
install the other pinned packages, link the studio's own code (a .pth file), verify.
Each finished step is recorded; a cancelled or failed install continues at the step
it stopped in, and an install with nothing changed only checks and returns.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.files import atomic_write_text, try_lock, unlock
from studio.core.trainenv.in_use import env_users
from studio.core.trainenv.plan import InstallPlan
from studio.core.trainenv.progress import InstallProgress, OutputReader
from studio.core.trainenv.sources import explain_failure
from studio.core.trainenv.state import (
    LOG_FILE,
    PTH_FILE,
    STATE_FILE,
    EnvCheck,
    EnvState,
    check_env,
    clear_ready,
    read_ready,
    read_state,
    write_ready,
    write_state,
)
from studio.core.trainenv.steps import Cancelled, StepFailed, run_logged
from studio.core.trainenv.tools import UV, create_command, install_command, pip_has_raw_progress
from studio.core.trainenv.verify import mismatched_versions, verify_command
from studio.core.training_python import env_python, pins_stamp

STEPS = ("create", "torch", "packages", "link", "verify")
REPLACING = frozenset({"create", "torch", "packages"})  # the steps that remove or replace what a trainer runs
LOCK_SUFFIX = ".lock"  # training-env.lock beside training-env: held while an install runs
ProgressCallback = Callable[[InstallProgress], None]
CancelCheck = Callable[[], bool]


@dataclass
class InstallResult:
    python: Path
    up_to_date: bool  # nothing needed doing
    steps_run: list[str] = field(default_factory=list)
    seconds: float = 0.0
    facts: dict[str, object] = field(default_factory=dict)  # what verify found (torch version, CUDA)


def is_up_to_date(plan: InstallPlan, check: EnvCheck | None = None) -> bool:
    """The environment is complete, made for this plan, pinned as it should be and linked to this studio."""
    ready = read_ready(plan.folder)
    if not ready or ready.get("stamp") != plan.stamp():
        return False
    check = check or check_env(plan.folder, plan.distribution_names())
    return check.runs and not mismatched_versions(plan, check) and _linked(plan, check)


def _linked(plan: InstallPlan, check: EnvCheck) -> bool:
    return check.studio is not None and Path(check.studio).resolve() == (plan.studio_source / "studio").resolve()


def steps_to_run(plan: InstallPlan, force: bool = False) -> list[str]:
    """The steps an install would run now (all of them for a new environment)."""
    check = check_env(plan.folder, plan.distribution_names())
    if not check.runs:
        return list(STEPS)
    if force:
        return list(STEPS[1:])
    if is_up_to_date(plan, check):
        return []
    state = read_state(plan.folder)
    done = set(state.steps_done) if state.stamp == plan.stamp() else {"create"}
    if not _linked(plan, check):
        done -= {"link", "verify"}
    if read_ready(plan.folder) is not None and mismatched_versions(plan, check):
        # It was complete, and something changed it since: install the packages again.
        done -= {"torch", "packages"}
    done.discard("verify")  # not up to date: verify again, which marks the environment ready
    return [step for step in STEPS if step not in done]


def install(plan: InstallPlan, progress: ProgressCallback | None = None, cancel: CancelCheck | None = None,
            force: bool = False) -> InstallResult:
    """Run the steps that are not done; raises Cancelled or StepFailed (with the log's path)."""
    with _install_lock(plan.folder):
        return _install(plan, progress, cancel, force)


@contextmanager
def _install_lock(folder: Path) -> Iterator[None]:
    """One install at a time into a folder: a second one (another studio window, `studio-train env install`)
    would clear the environment the first is making, or install into it at the same time. An OS lock on a
    file beside the folder, dropped by the kernel however the install's process ends."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder.with_name(folder.name + LOCK_SUFFIX), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not try_lock(fd):
            raise StepFailed("install", f"another studio window (or studio-train env) is installing the training "
                             f"environment in {folder} right now: wait until it finishes, then install again",
                             folder / LOG_FILE)
        try:
            yield
        finally:
            unlock(fd)
    finally:
        os.close(fd)


def _install(plan: InstallPlan, progress: ProgressCallback | None, cancel: CancelCheck | None,
             force: bool) -> InstallResult:
    started = time.monotonic()
    python = env_python(plan.folder)
    todo = steps_to_run(plan, force)
    if not todo:
        return InstallResult(python, True, seconds=time.monotonic() - started, facts=read_ready(plan.folder) or {})
    if plan.build.problem and plan.wheelhouse is None:
        raise StepFailed("torch", plan.build.problem, plan.folder / LOG_FILE)
    users = env_users(plan.folder) if set(todo) & REPLACING else []
    if users:
        # Packages replaced under a running trainer: its next import (or a rank started later) reads half of
        # one version and half of another, and on Windows the files in use cannot be replaced at all.
        raise StepFailed("install", f"{' and '.join(users)} {'runs' if len(users) == 1 else 'run'} with the "
                         f"environment in {plan.folder} right now: wait until it ends (or stop it), then install "
                         "again; nothing was changed", plan.folder / LOG_FILE)
    plan.folder.parent.mkdir(parents=True, exist_ok=True)
    state = read_state(plan.folder) if "create" not in todo else EnvState()
    state.stamp, state.torch_build, state.tool = plan.stamp(), plan.build.tag, plan.tool.kind
    state.steps_done = [s for s in STEPS if s not in todo]
    clear_ready(plan.folder)
    if "create" not in todo:
        write_state(plan.folder, state)
    facts: dict[str, object] = {}
    for step in todo:
        if cancel and cancel():
            raise Cancelled(step)
        start = InstallProgress(step, STEPS.index(step) + 1, len(STEPS))
        if progress:
            progress(start)
        facts = _run_step(plan, step, OutputReader(start), progress, cancel, force) or facts
        state.steps_done.append(step)
        write_state(plan.folder, state)
    ready = {"stamp": plan.stamp(), "torch_build": plan.build.tag, "tool": plan.tool.kind,
             "studio_source": str(plan.studio_source), "pins": pins_stamp(plan.packages.constraints), **facts}
    write_ready(plan.folder, ready)
    return InstallResult(python, False, todo, time.monotonic() - started, ready)


def _run_step(plan: InstallPlan, step: str, reader: OutputReader, progress: ProgressCallback | None,
              cancel: CancelCheck | None, force: bool = False) -> dict[str, object] | None:
    python = env_python(plan.folder)
    log = plan.folder / LOG_FILE if step != "create" else plan.folder.with_name(plan.folder.name + "-" + LOG_FILE)
    if step == "create":
        _clear_folder(plan.folder)
        _run_explained(plan, create_command(plan.tool, plan.folder), step, log, reader, progress, cancel)
        plan.folder.mkdir(parents=True, exist_ok=True)
        shutil.move(str(log), plan.folder / LOG_FILE)
        write_state(plan.folder, EnvState(plan.stamp(), ["create"], plan.build.tag, plan.tool.kind))
        return None
    if step in ("torch", "packages"):
        base = install_command(plan.tool, python, pip_has_raw_progress(python), isolated=plan.wheelhouse is not None)
        wanted = [plan.packages.torch_requirement] if step == "torch" else list(plan.packages.others)
        # Repair installs again (uv and pip otherwise only check that the versions are there).
        again = (["--reinstall"] if plan.tool.kind == UV else ["--force-reinstall"]) if force else []
        from_torch_index = step == "torch" and not _torch_index_skipped(plan, log)
        command = [*base, *again, "-c", str(plan.packages.constraints), *plan.source_args(from_torch_index), *wanted]
        _run_explained(plan, command, step, log, reader, progress, cancel)
        return None
    if step == "link":
        _link_studio(plan)
        return None
    return _verify(plan, log, reader, progress, cancel)


def _torch_index_skipped(plan: InstallPlan, log: Path) -> bool:
    """torch from the person's own sources when PyTorch's index cannot be reached from here (said in the log)."""
    if not plan.torch_index_unreachable():
        return False
    host = urllib.parse.urlparse(plan.build.index_url or "").hostname or plan.build.index_url
    with log.open("a", encoding="utf-8") as out:
        out.write(f"note: {host} cannot be reached from this machine; torch comes from your own package sources "
                  f"({', '.join(plan.sources()[1:])})\n")
    return True


def _run_explained(plan: InstallPlan, command: list[str], step: str, log: Path, reader: OutputReader,
                   progress: ProgressCallback | None, cancel: CancelCheck | None) -> list[str]:
    """run_logged, with the person's sources for uv, and a failure said with the host or file and the fix."""
    try:
        return run_logged(command, step, log, reader, progress, cancel, plan.tool_environment())
    except StepFailed as failed:
        why = explain_failure(failed.lines, plan.sources())
        if why is None:
            raise
        raise StepFailed(step, f"{why} ({failed.message})", log, failed.lines) from None


def _clear_folder(folder: Path) -> None:
    """Remove an old environment before making it again; never a folder that is something else."""
    if not folder.exists():
        return
    ours = (folder / "pyvenv.cfg").is_file() or (folder / STATE_FILE).is_file()
    if not ours and any(folder.iterdir()):
        raise StepFailed("create", f"{folder} exists and is not a training environment the studio made: "
                         "choose an empty or new folder", folder.with_name(folder.name + "-" + LOG_FILE))
    shutil.rmtree(folder)


def _link_studio(plan: InstallPlan) -> None:
    """A .pth file puts the studio's source on the environment's path (the trainer runs this code)."""
    check = check_env(plan.folder, [])
    if not check.runs or not check.purelib:
        raise StepFailed("link", f"the environment's Python does not run: {check.error}", plan.folder / LOG_FILE)
    atomic_write_text(Path(check.purelib) / PTH_FILE, pth_text(plan.studio_source))


def pth_text(source: Path) -> str:
    """The .pth file's line that puts `source` on the path. Python 3.11 and 3.12 read .pth files in the
    locale's encoding (on Windows the ANSI code page, not UTF-8), so a folder with letters outside ASCII (a
    Windows user name such as José) would come out garbled: it is added by an all-ASCII import line instead."""
    text = str(source)
    return f"{text}\n" if text.isascii() else f"import sys; sys.path.append({text!a})\n"


def _verify(plan: InstallPlan, log: Path, reader: OutputReader, progress: ProgressCallback | None,
            cancel: CancelCheck | None) -> dict[str, object]:
    check = check_env(plan.folder, plan.distribution_names())
    wrong = mismatched_versions(plan, check) if check.runs else [check.error or "it does not run"]
    if wrong:
        raise StepFailed("verify", "the environment does not hold what was installed: " + "; ".join(wrong), log)
    if not _linked(plan, check):
        raise StepFailed("verify", f"the environment does not find the studio's code at {plan.studio_source}", log)
    output = run_logged(verify_command(env_python(plan.folder)), "verify", log, reader, progress, cancel)
    facts: dict[str, object] = next(
        (json.loads(line.split(" ", 1)[1]) for line in output if line.startswith("STUDIO_ENV_VERIFY ")), {})
    return {"python": check.python, **facts}
