"""What an install left in the environment's folder: the steps it finished, and what it is.

`studio-env.json` lists the finished steps with the stamp of the plan they belong to, so
an install that was cancelled or failed continues where it stopped. `studio-ready.json`
(written last) says the environment is complete; the studio trains with it from then on.
The quick check asks the environment's Python what it has, without importing torch.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from studio.core.console_window import no_window
from studio.core.files import atomic_write_text
from studio.core.training_python import READY_FILE, env_python

STATE_FILE = "studio-env.json"
LOG_FILE = "install.log"
PTH_FILE = "studio-source.pth"
CHECK_TIMEOUT_S = 60

# Run by the environment's own Python: its version, where it puts packages, the version of
# each distribution asked for, and where `studio` comes from. No package is imported.
_CHECK_SCRIPT = """
import importlib.metadata as m, importlib.util as u, json, sys, sysconfig
names = json.loads(sys.argv[1])
versions = {}
for name in names:
    try:
        versions[name] = m.version(name)
    except m.PackageNotFoundError:
        versions[name] = None
spec = u.find_spec("studio")
print("STUDIO_ENV_CHECK " + json.dumps({
    "python": "%d.%d.%d" % sys.version_info[:3], "purelib": sysconfig.get_paths()["purelib"],
    "versions": versions, "studio": (spec.submodule_search_locations or [None])[0] if spec else None}))
"""


@dataclass
class EnvState:
    stamp: str = ""
    steps_done: list[str] = field(default_factory=list)
    torch_build: str = ""
    tool: str = ""


@dataclass(frozen=True)
class EnvCheck:
    """What the environment's Python reported, or why it could not."""

    python: str | None = None
    purelib: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    studio: str | None = None
    error: str | None = None

    @property
    def runs(self) -> bool:
        return self.error is None


def read_state(folder: Path) -> EnvState:
    try:
        data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        return EnvState(**{k: v for k, v in data.items() if k in EnvState.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return EnvState()


def write_state(folder: Path, state: EnvState) -> None:
    atomic_write_text(folder / STATE_FILE, json.dumps(asdict(state), indent=1) + "\n")


def read_ready(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / READY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_ready(folder: Path, facts: dict[str, Any]) -> None:
    atomic_write_text(folder / READY_FILE, json.dumps(facts, indent=1) + "\n")


def clear_ready(folder: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (folder / READY_FILE).unlink()


def check_env(folder: Path, names: list[str]) -> EnvCheck:
    """Ask the environment's Python for its version and the versions of `names` (about 0.1 s)."""
    python = env_python(folder)
    if not python.exists():
        return EnvCheck(error=f"{python} does not exist")
    try:
        out = subprocess.run([str(python), "-I", "-c", _CHECK_SCRIPT, json.dumps(names)], capture_output=True,
                             text=True, timeout=CHECK_TIMEOUT_S, check=False, creationflags=no_window())
    except (OSError, subprocess.SubprocessError) as exc:
        return EnvCheck(error=f"{python} does not start: {exc}")
    for line in out.stdout.splitlines():
        if line.startswith("STUDIO_ENV_CHECK "):
            data = json.loads(line.split(" ", 1)[1])
            return EnvCheck(data["python"], data["purelib"], data["versions"], data["studio"])
    last = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
    return EnvCheck(error=f"{python} does not run: {last}")
