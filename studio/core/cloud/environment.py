"""The cloud environment: a Python of its own with SkyPilot, for a studio that has none beside it.

The desktop app is frozen without SkyPilot (and SkyPilot's pins differ from the training
environment's), so "Install SkyPilot…" (Export page) and `studio-train cloud setup` make a virtual
environment next to the training environment and install `skypilot[runpod]` pinned by the shipped
constraints/cloud.txt. Cloud requests then run there through the bridge (bridge.py).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from studio.core.cloud.api import CloudError
from studio.core.resources import app_root
from studio.core.trainenv.plan import chosen_wheelhouse
from studio.core.trainenv.tools import NoEnvTool, choose_tool, create_command, install_command
from studio.core.training_python import env_dir, env_python

CLOUD_ENV_VAR = "STUDIO_CLOUD_ENV"
CLOUD_CONSTRAINTS = Path("constraints") / "cloud.txt"
SKYPILOT = "skypilot[runpod]"
LOG_FILE = "install.log"


def cloud_env_dir() -> Path:
    """$STUDIO_CLOUD_ENV, else `cloud-env` beside the training environment."""
    return Path(os.environ.get(CLOUD_ENV_VAR) or env_dir().parent / "cloud-env")


def has_skypilot(folder: Path) -> bool:
    """Whether the virtual environment in `folder` holds SkyPilot's `sky` package: read from its site-packages
    (no interpreter started, so the Export page asks it on the GUI thread for free)."""
    return any(folder.glob("lib/python*/site-packages/sky/__init__.py")) \
        or (folder / "Lib" / "site-packages" / "sky" / "__init__.py").is_file()


def cloud_python(folder: Path | None = None) -> Path | None:
    """The cloud environment's interpreter when it has SkyPilot, else None."""
    folder = folder or cloud_env_dir()
    python = env_python(folder)
    return python if python.exists() and has_skypilot(folder) else None


def install_cloud_env(folder: Path | None = None, wheelhouse: Path | None = None,
                      on_line: Callable[[str], None] | None = None) -> Path:
    """Make the cloud environment and install SkyPilot into it; its interpreter. CloudError (with the log) if not.

    `wheelhouse` (else $STUDIO_WHEELHOUSE, as for the training environment) installs from a folder of wheels."""
    folder = folder or cloud_env_dir()
    wheelhouse = chosen_wheelhouse(wheelhouse)
    constraints = app_root() / CLOUD_CONSTRAINTS
    if not constraints.is_file():
        raise CloudError(f"{constraints} is missing: the studio cannot pin SkyPilot; reinstall the studio")
    try:
        tool = choose_tool()
    except NoEnvTool as exc:
        raise CloudError(str(exc)) from None
    folder.parent.mkdir(parents=True, exist_ok=True)
    log = folder.parent / f"{folder.name}-{LOG_FILE}"
    python = env_python(folder)
    sources = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    steps = [create_command(tool, folder)] if not python.exists() else []
    steps.append([*install_command(tool, python, isolated=wheelhouse is not None), "-c", str(constraints), *sources, SKYPILOT])
    with log.open("w", encoding="utf-8") as out:
        for command in steps:
            out.write("$ " + " ".join(command) + "\n")
            out.flush()
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  encoding="utf-8", errors="replace") as process:
                assert process.stdout is not None
                for line in process.stdout:
                    out.write(line)
                    if on_line is not None:
                        on_line(line.rstrip())
            if process.returncode != 0:
                raise CloudError(f"installing SkyPilot failed ({command[0]} exit status {process.returncode}); "
                                 f"every line is in {log}; check the internet connection or pip's index, then "
                                 "install again")
    if cloud_python(folder) is None:
        raise CloudError(f"SkyPilot was installed into {folder} but does not import there; see {log}")
    return python
