"""Time exporting the demo project as a bundle and checking it (median of a few runs).

    python benchmarks/export_bundle.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from studio.core.export.bundle import export_bundle
from studio.core.export.check import run_checks
from studio.core.export.cost import cost_table, vram_estimator, workload_from_config
from studio.core.export.gpu_catalogue import load_catalogue
from studio.core.project.demo import DEMO_MODEL, create_demo_project


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project = create_demo_project(root / "demo")
        (project.root / DEMO_MODEL).mkdir(parents=True)
        (project.root / DEMO_MODEL / "model_index.json").write_text("{}\n")
        exports, checks, tables = [], [], []
        for i in range(args.repeat):
            start = time.perf_counter()
            export_bundle(project.config_path, root / f"b{i}", gpus=2, include_model=True, zip=True)
            exports.append(time.perf_counter() - start)
            start = time.perf_counter()
            run_checks(root / f"b{i}", allow_no_gpu=True)  # includes the torch probe subprocess
            checks.append(time.perf_counter() - start)
            config = project.load_config()
            start = time.perf_counter()
            cost_table(workload_from_config(config, project.root), load_catalogue(), vram_estimator(config))
            tables.append(time.perf_counter() - start)
        cpu = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
        print(f"machine: {cpu} CPU cores, Python {sys.version.split()[0]}; {args.repeat} runs, medians")
        print(f"export demo bundle (2 GPUs, model copied, zip): {statistics.median(exports) * 1000:.0f} ms")
        print(f"check.sh checks (torch probe included):          {statistics.median(checks) * 1000:.0f} ms")
        print(f"cost table (8 GPU types x 4 counts):             {statistics.median(tables) * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
