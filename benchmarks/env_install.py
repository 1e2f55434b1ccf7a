"""Training environment install from a local folder of wheels: a fresh install, and a second
install with nothing changed (which should only check, well under 5 s).

    .venv/bin/python benchmarks/env_install.py [--runs 3] [--tool venv|uv]

The wheels are the stand-ins the tests build (one tiny wheel per training package, at its
pinned version), so the figure is the studio's own work: making the venv (Python's venv with
pip, or uv), pip's resolve and install of the pinned list, the link and the verify step.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fixtures.wheelhouse import standin_wheelhouse  # noqa: E402

from studio.core.hardware.machine.probe import load_profile  # noqa: E402
from studio.core.trainenv.installer import install  # noqa: E402
from studio.core.trainenv.packages import CONSTRAINTS  # noqa: E402
from studio.core.trainenv.plan import make_plan  # noqa: E402


def cli_seconds(folder: Path, wheels: Path, tool: str) -> float:
    """`studio-train env install` with nothing to do, as a person runs it (a whole process)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "studio.cli", "env", "install", "--folder", str(folder), "--wheelhouse",
                    str(wheels), "--tool", tool, "--hardware", "no-gpu"], check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tool", choices=("venv", "uv"), default="venv")
    args = parser.parse_args()
    fresh, again, again_cli = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        wheels = standin_wheelhouse(Path(tmp) / "wheels", ROOT / CONSTRAINTS)
        packages = len(list(wheels.glob("*.whl")))
        for run in range(args.runs):
            folder = Path(tmp) / f"env{run}"
            plan = make_plan(folder, args.tool, None, wheels, load_profile("no-gpu"))
            result = install(plan)
            fresh.append(result.seconds)
            again.append(install(plan).seconds)
            again_cli.append(cli_seconds(folder, wheels, args.tool))
            shutil.rmtree(folder)
    print(json.dumps({
        "tool": args.tool, "runs": args.runs, "packages": packages,
        "fresh_install_s_median": round(statistics.median(fresh), 2), "fresh_install_s_all": [round(s, 2) for s in fresh],
        "no_change_install_s_median": round(statistics.median(again), 3),
        "no_change_cli_s_median": round(statistics.median(again_cli), 2),
        "no_change_cli_s_all": [round(s, 2) for s in again_cli],
    }))


if __name__ == "__main__":
    main()
