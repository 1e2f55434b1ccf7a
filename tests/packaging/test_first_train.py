"""A newcomer's first Train with the desktop app as people get it: the frozen build, installed by
install.sh into an empty home folder, the INSTALLED copy started, Train pressed on the demo; the
Training Environment installs from a folder of wheels, the demo's model is built, the run trains to
its end, in a window drawn through Qt's X11 plugin on Xvfb where it is installed (offscreen
otherwise). Asserted: the LoRA file on disk, loss points drawn in the plot, no question asked (no
download offered) and no `studio-train` advice shown. Then, on the Export page, Install SkyPilot… makes the
cloud environment from the same folder (holding a stand-in SkyPilot) and a cloud run is launched through it.

The wheels are the pinned packages of the environment, fetched once into build/first-train-wheels
by pip from the sources it is set up with (this machine's wheel folder or mirror; PyPI and PyTorch's
CPU index otherwise), so a second run downloads nothing. It takes minutes: run only with
STUDIO_FIRST_TRAIN=1 (the package job), like the frozen build's smoke test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fixtures.fake_sky import FAKE_SKY
from fixtures.wheelhouse import build_wheel
from fixtures.x_display import x_display

from studio.core.trainenv.packages import CONSTRAINTS, package_lists, pinned_versions
from tests.packaging.test_frozen_app import executable, frozen_app  # noqa: F401 - the build fixture

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("STUDIO_FIRST_TRAIN") != "1", reason="STUDIO_FIRST_TRAIN=1 runs it"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="install.sh is the Linux download's"),
]
WHEELS = ROOT / "build" / "first-train-wheels"
RUN_TIMEOUT_S = 1800
PYTORCH_CPU = "https://download.pytorch.org/whl/cpu/"


def fill_wheel_folder(folder: Path) -> Path:
    """Every wheel the training environment installs (the CPU build of torch), once."""
    version = pinned_versions(ROOT / CONSTRAINTS)["torch"]
    if any(folder.glob(f"torch-{version}+cpu-*.whl")) and (folder / "complete").is_file():
        return folder
    lists = package_lists(nvidia=False)
    try:  # PyTorch's CPU index, where pip's own sources do not hold the +cpu build
        urllib.request.urlopen(PYTORCH_CPU, timeout=5).close()
        extra = ["--extra-index-url", PYTORCH_CPU]
    except OSError:
        extra = []
    subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--only-binary",
                    ":all:", "-d", str(folder), "-c", str(ROOT / CONSTRAINTS), *extra, f"torch=={version}+cpu",
                    *lists.others], check=True, timeout=1200)
    (folder / "complete").write_text("")
    return folder


def with_standin_skypilot(wheels: Path, folder: Path) -> Path:
    """The environment's wheels (linked, not copied) and a stand-in SkyPilot at the pinned version."""
    folder.mkdir()
    for wheel in wheels.iterdir():
        (folder / wheel.name).symlink_to(wheel)
    version = pinned_versions(ROOT / "constraints" / "cloud.txt")["skypilot"]
    build_wheel(folder, "skypilot", version, {"sky/__init__.py": FAKE_SKY})
    return folder


def install_download(app: Path, home: Path, download: Path) -> Path:
    """Lay the download out as the tar.gz does (build_app.linux_archive) and run its install.sh."""
    shutil.copytree(app.parent, download / "studio", symlinks=True)
    shutil.copy(ROOT / "packaging" / "install-app.sh", download / "install.sh")
    shutil.copy(ROOT / "packaging" / "studio.desktop", download / "sd-training-studio.desktop")
    shutil.copy(ROOT / "resources" / "icons" / "studio.svg", download / "sd-training-studio.svg")
    subprocess.run(["bash", str(download / "install.sh")], env=clean_env(home), check=True, capture_output=True,
                   timeout=300)
    installed = home / ".local" / "bin" / "studio"
    assert installed.is_symlink() and (home / ".local/share/applications/sd-training-studio.desktop").is_file()
    return installed


def clean_env(home: Path) -> dict[str, str]:
    """A stranger's account: their own home, none of this checkout's settings."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CONFIG_FILE",
            "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "DISPLAY", "XAUTHORITY")
    env = {k: v for k, v in os.environ.items() if k in keep}
    return dict(env, HOME=str(home))


def test_the_installed_apps_first_train_on_the_demo_trains_to_a_lora(frozen_app: Path, tmp_path: Path) -> None:  # noqa: F811
    wheels = fill_wheel_folder(WHEELS)
    home = tmp_path / "home"
    home.mkdir()
    installed = install_download(frozen_app, home, tmp_path / "download")
    report = tmp_path / "first-train.json"
    wheels = with_standin_skypilot(wheels, tmp_path / "wheels")
    (tmp_path / "sky-state").mkdir()
    env = dict(clean_env(home), STUDIO_WHEELHOUSE=str(wheels), STUDIO_SELF_TEST_REPORT=str(report),
               HF_HUB_OFFLINE="1", STUDIO_CLOUD_LAUNCH_TEST="1", FAKE_SKY_STATE=str(tmp_path / "sky-state"))
    with x_display() as display:  # the window through Qt's X11 plugin where Xvfb is installed, as on a desktop
        env["QT_QPA_PLATFORM"] = "xcb" if display else "offscreen"
        if display:
            env["DISPLAY"] = display
        started = time.monotonic()
        out = subprocess.run([str(installed), "--first-train-test"], capture_output=True, text=True, env=env,
                             timeout=RUN_TIMEOUT_S)
        seconds = time.monotonic() - started
    assert report.is_file(), out.stderr[-4000:]
    facts = json.loads(report.read_text(encoding="utf-8"))
    print(f"first Train of the installed app: {seconds:.0f} s; {json.dumps(facts)[:2000]}")
    assert facts.get("error") is None, (facts, out.stderr[-4000:])
    assert facts["qt_platform"] == env["QT_QPA_PLATFORM"]
    assert facts["environment_window"] and facts["environment_result"].startswith("Ready")
    assert facts["questions"] == []  # no download offered, nothing else asked
    assert not any("studio-train" in message for message in facts["messages"])
    assert facts["status"] == "finished" and facts["loss_drawn"] > 0
    (lora,) = facts["lora_files"]
    assert Path(lora).stat().st_size > 0 and Path(lora).is_relative_to(home)
    assert (home / ".local/share/sd-training-studio/demo-project/models/tiny-sd15/model_index.json").is_file()
    # Then the cloud launch: Install SkyPilot… made the cloud environment, the launch went through its bridge.
    assert "SkyPilot is ready" in facts["cloud"]["install"] and facts["cloud"]["launched"], facts["cloud"]
    assert (tmp_path / "sky-state" / "launched").read_text() == facts["cloud"]["cluster"]
    assert out.returncode == 0 and facts["ok"]
