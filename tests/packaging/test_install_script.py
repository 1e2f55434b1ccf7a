"""install.sh of the Linux download: the app, the `studio` command and a menu entry with its icon,
for this user only; again to update; --uninstall takes them away and keeps the person's data."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the Linux download's script")


def unpacked_download(folder: Path, marker: str) -> Path:
    """The archive's layout (build_app.linux_archive) with a stand-in for the frozen app."""
    app = folder / "studio"
    (app / "_internal").mkdir(parents=True)
    (app / "studio").write_text(f"#!/bin/sh\necho {marker}\n")
    (app / "studio").chmod(0o755)
    shutil.copy(ROOT / "packaging" / "install-app.sh", folder / "install.sh")
    shutil.copy(ROOT / "packaging" / "studio.desktop", folder / "sd-training-studio.desktop")
    shutil.copy(ROOT / "resources" / "icons" / "studio.svg", folder / "sd-training-studio.svg")
    return folder


def run_script(download: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "XDG_DATA_HOME"}
    return subprocess.run(["bash", str(download / "install.sh"), *args], env=dict(env, HOME=str(home)),
                          capture_output=True, text=True, check=True)


def test_install_update_and_uninstall(tmp_path: Path) -> None:
    home = tmp_path / "home"
    share = home / ".local" / "share"
    app = share / "sd-training-studio" / "app"
    out = run_script(unpacked_download(tmp_path / "v1", "version-1"), home)
    assert "Installed" in out.stdout
    command = home / ".local" / "bin" / "studio"
    assert subprocess.run([str(command)], capture_output=True, text=True).stdout.strip() == "version-1"
    entry = (share / "applications" / "sd-training-studio.desktop").read_text()
    assert f'Exec="{app}/studio"\n' in entry and "Icon=sd-training-studio" in entry
    assert (share / "icons" / "hicolor" / "scalable" / "apps" / "sd-training-studio.svg").is_file()

    (share / "sd-training-studio" / "training-env").mkdir()  # the person's data beside the app
    run_script(unpacked_download(tmp_path / "v2", "version-2"), home)
    assert subprocess.run([str(command)], capture_output=True, text=True).stdout.strip() == "version-2"
    assert not (share / "sd-training-studio" / "app.new").exists()

    out = run_script(tmp_path / "v2", home, "--uninstall")
    assert not app.exists() and not command.is_symlink()
    assert not (share / "applications" / "sd-training-studio.desktop").exists()
    assert (share / "sd-training-studio" / "training-env").is_dir()
    assert "training environment are still in" in out.stdout


def test_uninstall_removes_the_training_environment_when_asked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    share = home / ".local" / "share" / "sd-training-studio"
    download = unpacked_download(tmp_path / "v1", "version-1")
    run_script(download, home)
    env = share / "training-env"
    (env / "lib").mkdir(parents=True)
    (env / "studio-env.json").write_text("{}")
    (share / "demo-project").mkdir()
    out = run_script(download, home, "--uninstall")
    assert env.is_dir() and "--uninstall --remove-training-env" in out.stdout  # says how, and its size
    run_script(download, home)
    out = run_script(download, home, "--uninstall", "--remove-training-env")
    assert not env.exists() and (share / "demo-project").is_dir()
    assert f"Removed the training environment ({env})." in out.stdout


def test_the_menu_entry_is_valid() -> None:
    validate = shutil.which("desktop-file-validate")
    if validate is None:
        pytest.skip("desktop-file-validate is not installed (apt-get install desktop-file-utils)")
    out = subprocess.run([validate, str(ROOT / "packaging" / "studio.desktop")], capture_output=True, text=True)
    assert (out.returncode, out.stdout + out.stderr) == (0, "")


def test_outside_an_unpacked_download_it_says_so(tmp_path: Path) -> None:
    shutil.copy(ROOT / "packaging" / "install-app.sh", tmp_path / "install.sh")
    done = subprocess.run(["bash", str(tmp_path / "install.sh")], env=dict(os.environ, HOME=str(tmp_path)),
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert "run install.sh from the unpacked download" in done.stderr
