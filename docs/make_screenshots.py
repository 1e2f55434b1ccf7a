"""Regenerate the user guide's screenshots from the real app.

    .venv/bin/python docs/make_screenshots.py

Builds the demo project, trains it once with `studio-train run`, then opens the app
with `--self-test` on that project (the run replayed on the Train page, an RTX 4090
profile on the Model & Preset page) and saves one PNG per page into docs/images/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"


def main() -> None:
    from studio.core.project.demo import create_demo_project

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory() as tmp:
        env["STUDIO_CONFIG_DIR"] = str(Path(tmp) / "config")
        project = create_demo_project(Path(tmp) / "demo-project", build_model=True)
        subprocess.run(
            [sys.executable, "-m", "studio.cli", "run", str(project.config_path)],
            check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
        )
        run_dir = sorted(project.runs_dir.iterdir())[-1]
        shots = Path(tmp) / "shots"
        out = subprocess.run(
            [sys.executable, "-m", "studio", "--self-test", "--project", str(project.root),
             "--replay", str(run_dir), "--hardware", "rtx4090-24gb", "--screenshots", str(shots)],
            check=True, env=env, cwd=ROOT, capture_output=True, text=True,
        )
        IMAGES.mkdir(parents=True, exist_ok=True)
        for png in sorted(shots.glob("*.png")):
            shutil.copy(png, IMAGES / png.name)
        print(json.dumps({"images": sorted(p.name for p in IMAGES.glob("*.png")),
                          "facts": json.loads(out.stdout.strip().splitlines()[-1])}))


if __name__ == "__main__":
    main()
