"""The docs' screenshots: every image the docs show exists, each is a shot that
docs/make_screenshots.py takes, and the script still takes them (two run here, by name)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from fixtures.waits import scaled_s
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _script() -> object:
    spec = importlib.util.spec_from_file_location("make_screenshots", DOCS / "make_screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def referenced_images() -> dict[str, list[str]]:
    """images/NAME.png referenced by each docs page."""
    return {page.name: re.findall(r"!\[[^\]]*\]\((images/[^)\s]+)\)", page.read_text(encoding="utf-8"))
            for page in sorted(DOCS.glob("*.md"))}


def test_every_image_the_docs_show_exists_and_is_a_shot_of_the_script() -> None:
    shots = {f"images/{shot.name}.png" for shot in _script().SHOTS}  # type: ignore[attr-defined]
    shown = {image for images in referenced_images().values() for image in images}
    assert sorted(image for image in shown if not (DOCS / image).is_file()) == []
    assert sorted(shown - shots) == []  # no picture the script would not make again
    assert sorted(shots - shown) == []  # no shot that no page shows


def test_the_tutorial_has_a_screenshot_for_each_step() -> None:
    tutorial = referenced_images()["tutorial.md"]
    assert len(tutorial) == len(set(tutorial)) >= 10
    steps = [shot.step for shot in _script().SHOTS]  # type: ignore[attr-defined]
    assert len(steps) == len(set(steps))


def test_the_script_still_takes_its_shots(tmp_path: Path) -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    subprocess.run([sys.executable, str(DOCS / "make_screenshots.py"), "first-start", "open-folder",
                    "--out", str(tmp_path), "--scratch", str(tmp_path / "session")], check=True, env=env, cwd=ROOT, capture_output=True, timeout=scaled_s(300))
    written = sorted(p.name for p in tmp_path.glob("*.png"))
    assert written == ["02-first-start.png", "03-open-folder.png"]
    for name in written:
        with Image.open(tmp_path / name) as image:
            assert image.size == (1280, 800)
