"""The desktop app as people get it: built with PyInstaller the way `dev.py package` builds it,
started with --self-test offscreen, and through Qt's X11 plugin on Xvfb where it is installed; it
reports the same facts as the source run.

The build (about a minute on 2 cores) lands in build/frozen with PyInstaller's work folder
in build/pyinstaller, so a second run with no source changed takes seconds. The package job
(`dev.py test-app`, STUDIO_PACKAGE_JOB=1) runs these with the build it then installs; the suite
leaves them to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.x_display import x_display

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("STUDIO_PACKAGE_JOB") != "1", reason="the package job (dev.py test-app) runs it"),
]
BUILD_TIMEOUT_S = 900


def executable(dist: Path) -> Path:
    if sys.platform == "darwin":
        return dist / "Training Studio.app" / "Contents" / "MacOS" / "studio"
    return dist / "studio" / ("studio.exe" if sys.platform == "win32" else "studio")


@pytest.fixture(scope="module")
def frozen_app() -> Path:
    pytest.importorskip("PyInstaller")
    dist = ROOT / "build" / "frozen"
    subprocess.run([sys.executable, str(ROOT / "packaging" / "build_app.py"), "--no-archive", "--dist", str(dist),
                    "--work", str(ROOT / "build" / "pyinstaller")], check=True, timeout=BUILD_TIMEOUT_S,
                   stdout=subprocess.DEVNULL)
    return executable(dist)


@pytest.mark.parametrize("platform", ["offscreen", "xcb"])
def test_the_frozen_app_starts_and_reports_what_the_source_run_does(frozen_app: Path, tmp_path: Path,
                                                                     platform: str) -> None:
    """Offscreen everywhere; through Qt's X11 plugin (xcb) on a virtual screen where Xvfb is installed, as on a
    Linux desktop: the xcb plugin and the system libraries it loads are what a person's window needs."""
    from studio.gui.shell.main_window import PAGES

    if platform == "xcb" and not sys.platform.startswith("linux"):
        pytest.skip("the X11 plugin is the Linux download's")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["LD_LIBRARY_PATH"] = "/opt/the-persons-libraries"  # the person's own, which the app's children keep
    report = tmp_path / "self-test.json"  # how CI reads it from the windowed Windows app, which has no stdout
    with x_display() as display:
        if platform == "xcb":
            if display is None:
                pytest.skip("Xvfb is not installed (apt install xvfb)")
            env["DISPLAY"] = display
        out = subprocess.run([str(frozen_app), "--self-test"], capture_output=True, text=True, timeout=180,
                             env=dict(env, QT_QPA_PLATFORM=platform, STUDIO_SELF_TEST_REPORT=str(report)))
    assert out.returncode == 0, out.stderr[-3000:]
    facts = json.loads(report.read_text())
    assert facts["qt_platform"] == platform
    assert json.loads(out.stdout.strip().splitlines()[-1]) == facts
    assert facts["ok"] and facts["qt_warnings"] == 0 and facts["exceptions"] == 0
    assert facts["pages"] == [spec.page_id for spec in PAGES]
    assert facts["first_paint_ms"] is not None and facts["torch_imported"] is False
    if sys.platform.startswith("linux"):  # not the app's folder of libraries: ssh would load its OpenSSL
        assert facts["child_library_path"] == "/opt/the-persons-libraries"
    assert facts["dataset_images"] == 24  # the demo project, written by the frozen app
    assert sum(facts["presets_fit"].values()) == len(list((ROOT / "presets").glob("*.toml")))  # presets found


def test_the_frozen_app_carries_no_torch_and_the_trainers_source(frozen_app: Path) -> None:
    bundle = frozen_app.parent / "_internal" if sys.platform != "darwin" else frozen_app.parents[1] / "Resources"
    assert not any((bundle / name).exists() for name in ("torch", "diffusers", "transformers", "onnxruntime"))
    assert (bundle / "studio" / "train" / "loop.py").is_file()  # the training environment runs this
    assert (bundle / "constraints" / "ci.txt").is_file() and (bundle / "pyproject.toml").is_file()
    assert (bundle / "constraints" / "cloud.txt").is_file()  # the cloud environment's pins
    assert (bundle / "resources" / "trainenv" / "torch_builds.toml").is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux download's libraries")
def test_the_linux_app_uses_the_desktops_own_system_libraries(frozen_app: Path) -> None:
    """The system's C++, X11, font and GLib libraries and Qt's GTK theme are the desktop's, not the build
    machine's copies (packaging/frozen_layout.py says why); what Qt's own plugins need beyond a bare system
    stays. That the window still opens through xcb is the self-test above."""
    sys.path.insert(0, str(ROOT / "packaging"))
    from frozen_layout import is_system_library

    bundle = frozen_app.parent / "_internal"
    files = [p for p in bundle.rglob("*.so*") if p.is_file() or p.is_symlink()]
    assert [p.name for p in files if is_system_library(p.name)] == []
    assert not (bundle / "PySide6/Qt/plugins/platformthemes/libqgtk3.so").exists()
    assert not any((bundle / name).exists() for name in ("libcairo.so.2", "libatk-1.0.so.0", "libpcre2-8.so.0"))
    assert (bundle / "libxcb-cursor.so.0").is_file()  # needed by Qt's xcb plugin, missing on many desktops
    from build_app import unbundled_xcb_libraries

    # A build machine without libxcb-icccm4 / libxcb-keysyms1 made a download that carried neither: the build
    # now says so. Where .ci/run installed them, every library of the X11 plugin is carried.
    missing = unbundled_xcb_libraries(frozen_app.parent)
    if any(Path("/usr/lib").glob("*/libxcb-icccm.so.4")) or Path("/usr/lib/libxcb-icccm.so.4").exists():
        assert missing == []
    else:
        assert "libxcb-icccm.so.4" in missing
