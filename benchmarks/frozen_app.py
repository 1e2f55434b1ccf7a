"""The desktop app as people get it: size on disk and download, and double-click to first paint.

    .venv/bin/python benchmarks/frozen_app.py [--runs 5] [--app build/frozen/studio]

Uses the app `dev.py package` (or the frozen smoke test) built; builds it first when
missing. Each start is the frozen `studio --self-test` on the offscreen platform: the
self-test measures from the process's creation (what a double-click starts) to the main
window's first paint event. The source run (`python -m studio --self-test`) is measured
the same way, start for start in turn, for the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def self_test(command: list[str], scratch: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} if command[0] != sys.executable else dict(os.environ)
    env.update(QT_QPA_PLATFORM="offscreen", STUDIO_CONFIG_DIR=str(scratch / "config"),
               STUDIO_DATA_DIR=str(scratch / "data"), STUDIO_CACHE_DIR=str(scratch / "cache"))
    out = subprocess.run([*command, "--self-test"], capture_output=True, text=True, cwd=ROOT, env=env, check=True,
                         timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def download_mb(app: Path, scratch: Path) -> float:
    """The app folder as the Linux download packs it (tar.gz, level 6)."""
    archive = scratch / "app.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        tar.add(app, arcname="studio")
    return archive.stat().st_size / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--app", type=Path, default=ROOT / "build" / "frozen" / "studio")
    args = parser.parse_args()
    if not (args.app / "studio").exists():
        subprocess.run([sys.executable, str(ROOT / "packaging" / "build_app.py"), "--no-archive",
                        "--dist", str(args.app.parent)], check=True)
    frozen_cmd = [str(args.app / "studio")]
    source_cmd = [sys.executable, "-m", "studio"]
    frozen, source = [], []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        self_test(frozen_cmd, scratch)  # warm the file cache; not counted
        self_test(source_cmd, scratch)
        for _ in range(args.runs):
            frozen.append(self_test(frozen_cmd, scratch))
            source.append(self_test(source_cmd, scratch))
        packed = download_mb(args.app, scratch)
    paint_frozen = [r["first_paint_ms"] for r in frozen]
    paint_source = [r["first_paint_ms"] for r in source]
    print(json.dumps({
        "app_mb": round(folder_mb(args.app), 1), "download_mb": round(packed, 1), "runs": args.runs,
        "frozen_first_paint_ms_median": statistics.median(paint_frozen), "frozen_first_paint_ms_all": paint_frozen,
        "source_first_paint_ms_median": statistics.median(paint_source), "source_first_paint_ms_all": paint_source,
        "ratio_frozen_over_source": round(statistics.median(f / s for f, s in zip(paint_frozen, paint_source, strict=True)), 2),
        "torch_imported": any(r["torch_imported"] for r in frozen + source),
    }))


if __name__ == "__main__":
    main()
