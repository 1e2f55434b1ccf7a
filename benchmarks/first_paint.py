"""Time from process start to the main window's first paint (median of N starts).

    .venv/bin/python benchmarks/first_paint.py [--runs 5]

Each start is a fresh `python -m studio --self-test` process on the offscreen platform;
the self-test measures from the process's creation time to the first paint event.
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


def one_start(scratch: Path) -> dict:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", STUDIO_CONFIG_DIR=str(scratch / "config"))
    out = subprocess.run(
        [sys.executable, "-m", "studio", "--self-test"],
        capture_output=True, text=True, cwd=ROOT, env=env, check=True, timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one_start(Path(tmp))  # warm the file cache; not counted
        results = [one_start(Path(tmp)) for _ in range(args.runs)]
    paints = [r["first_paint_ms"] for r in results]
    print(json.dumps({
        "runs": args.runs,
        "first_paint_ms_median": statistics.median(paints),
        "first_paint_ms_all": paints,
        "torch_imported": any(r["torch_imported"] for r in results),
    }))


if __name__ == "__main__":
    main()
