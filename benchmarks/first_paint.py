"""Time from process start to the main window's first paint (median of N starts).

    .venv/bin/python benchmarks/first_paint.py [--runs 5] [--source CHECKOUT]

Each start is a fresh `python -m studio --self-test` process on the offscreen platform;
the self-test measures from the process's creation time to the first paint event. Beside
each figure: the load average when that start began (the machine is shared), and the
self-test's `dataset_first_paint_ms` (from the project opened to the grid's first paint).
`--source` starts another checkout's studio (a before/after pair on the same machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_start(scratch: Path, source: Path = ROOT) -> dict:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", STUDIO_CONFIG_DIR=str(scratch / "config"),
               PYTHONPATH=str(source))
    load = os.getloadavg()[0]
    out = subprocess.run(
        [sys.executable, "-m", "studio", "--self-test"],
        capture_output=True, text=True, cwd=source, env=env, check=True, timeout=120,
    )
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "load": round(load, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout to start (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one_start(Path(tmp), args.source)  # warm the file cache; not counted
        results = [one_start(Path(tmp), args.source) for _ in range(args.runs)]
    paints = [r["first_paint_ms"] for r in results]
    grids = [r["dataset_first_paint_ms"] for r in results]
    print(json.dumps({
        "runs": args.runs,
        "first_paint_ms_median": statistics.median(paints),
        "first_paint_ms_all": paints,
        "load_all": [r["load"] for r in results],
        "dataset_first_paint_ms_median": statistics.median(grids),
        "dataset_first_paint_ms_all": grids,
        "torch_imported": any(r["torch_imported"] for r in results),
    }))


if __name__ == "__main__":
    main()
