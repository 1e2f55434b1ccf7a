"""Build the desktop app for this platform: the frozen GUI (PyInstaller, one folder) and its download.

    .venv/bin/python packaging/build_app.py            # dist/studio/ and the archive
    .venv/bin/python packaging/build_app.py --no-archive --dist build/frozen

`python3 dev.py package` runs this. PyInstaller's work folder (build/pyinstaller) is kept,
so a second build with no source changed takes seconds. On Linux the archive is a
tar.gz with install.sh (a menu entry and icon for this user), plus an AppImage when
appimagetool is on PATH; on Windows a zip; on macOS a zip of `Training Studio.app`.
Prints one JSON line: the folder, its size, the archive and the seconds taken.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP_NAME = "sd-training-studio"
SPEC = ROOT / "packaging" / "studio.spec"
ICON_SVG = ROOT / "resources" / "icons" / "studio.svg"


def version() -> str:
    for line in (ROOT / "studio" / "__init__.py").read_text(encoding="utf-8").splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise SystemExit("studio/__init__.py has no __version__")


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def render_icon(out: Path, size: int = 256) -> Path:
    """The SVG icon as a PNG (PyInstaller turns it into .ico / .icns; AppImages want one too)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication([])
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    QSvgRenderer(str(ICON_SVG)).render(painter)
    painter.end()
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(str(out))
    return out


def run_pyinstaller(dist: Path, work: Path) -> Path:
    """The frozen app's folder (dist/studio, or the .app bundle on macOS)."""
    if sys.platform in ("win32", "darwin"):
        render_icon(ROOT / "build" / "icons" / "studio.png")
    # The checkout's own code, even where another checkout is installed in editable mode.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    uv = find_uv()
    if sys.platform == "darwin" and uv is not None:
        env["STUDIO_BUNDLE_UV"] = str(uv)  # studio.spec puts it into the bundle before signing
    command = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
               "--distpath", str(dist), "--workpath", str(work), str(SPEC)]
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    app = dist / ("Training Studio.app" if sys.platform == "darwin" else "studio")
    if sys.platform.startswith("linux"):
        strip_debug(app)
    return app


def strip_debug(app: Path) -> None:
    """Drop the debugging sections of the Python interpreter's own libraries (a Python built from source
    carries about 30 MB of them); their symbols stay. Only those: the wheels' libraries were rewritten by
    auditwheel's patchelf, and strip breaks them ("ELF load command address/offset not page-aligned").
    Nothing is done without binutils' strip."""
    tool = shutil.which("strip")
    if tool is None:
        return
    internal = app / "_internal"
    files = [p for p in [*internal.glob("libpython3*.so*"), *sorted(internal.glob("python3*/lib-dynload/*.so"))]
             if p.is_file() and not p.is_symlink()]
    for start in range(0, len(files), 50):
        subprocess.run([tool, "--strip-debug", "--preserve-dates", *map(str, files[start:start + 50])], check=True)


# Qt's X11 plugin links these; PyInstaller bundles them only when the build machine has them.
XCB_LIBRARIES = ("libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0", "libxcb-image.so.0",
                 "libxcb-render-util.so.0", "libxkbcommon-x11.so.0")


def unbundled_xcb_libraries(app: Path) -> list[str]:
    """The X11 plugin's libraries the Linux app does not carry."""
    return [name for name in XCB_LIBRARIES if not (app / "_internal" / name).exists()]


def find_uv() -> Path | None:
    name = "uv.exe" if sys.platform == "win32" else "uv"
    found = Path(sys.executable).parent / name
    return found if found.is_file() else (Path(shutil.which("uv")) if shutil.which("uv") else None)


def add_uv(app: Path) -> Path | None:
    """Put uv beside the app's executable (the training environment is made with it, and it
    fetches a Python on a machine that has none); None when this environment has no uv.

    On macOS PyInstaller signs the bundle: uv goes in through the spec (STUDIO_BUNDLE_UV)
    before that, since a file added afterwards breaks the signature."""
    uv = find_uv()
    if uv is None:
        return None
    if sys.platform == "darwin":
        inside = next(iter(sorted(app.glob(f"Contents/**/{uv.name}"))), None)
        return inside
    target = app / uv.name
    shutil.copy2(uv, target)
    return target


def linux_archive(app: Path, out: Path) -> Path:
    """A tar.gz: the app, install.sh, the menu entry and the icon, in one top folder."""
    top = f"{APP_NAME}-{version()}-linux-{platform.machine()}"
    archive = out / f"{top}.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        tar.add(app, arcname=f"{top}/studio")
        tar.add(ROOT / "packaging" / "install-app.sh", arcname=f"{top}/install.sh")
        tar.add(ROOT / "packaging" / "studio.desktop", arcname=f"{top}/{APP_NAME}.desktop")
        tar.add(ICON_SVG, arcname=f"{top}/{APP_NAME}.svg")
    return archive


def appimage(app: Path, out: Path) -> Path | None:
    """An AppImage when appimagetool is on PATH (no package registry offers it), else None."""
    tool = shutil.which("appimagetool")
    if tool is None:
        return None
    appdir = out / "AppDir"
    shutil.rmtree(appdir, ignore_errors=True)
    shutil.copytree(app, appdir / "usr" / "lib" / APP_NAME, symlinks=True)
    (appdir / "AppRun").symlink_to(f"usr/lib/{APP_NAME}/studio")
    shutil.copy(ICON_SVG, appdir / f"{APP_NAME}.svg")
    desktop = (ROOT / "packaging" / "studio.desktop").read_text(encoding="utf-8")
    (appdir / f"{APP_NAME}.desktop").write_text(desktop.replace("Exec=studio", "Exec=AppRun"), encoding="utf-8")
    image = out / f"Training_Studio-{version()}-{platform.machine()}.AppImage"
    subprocess.run([tool, str(appdir), str(image)], check=True, env=dict(os.environ, ARCH=platform.machine()))
    shutil.rmtree(appdir)
    return image


def zip_folder(app: Path, out: Path, system: str) -> Path:
    archive = out / f"{APP_NAME}-{version()}-{system}-{platform.machine()}.zip"
    if system == "macos":
        # ditto keeps the .app bundle's symbolic links (zipfile would copy their targets twice).
        subprocess.run(["ditto", "-c", "-k", "--keepParent", str(app), str(archive)], check=True)
        return archive
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zipped:
        for path in sorted(app.rglob("*")):
            if path.is_file():
                zipped.write(path, Path(app.name) / path.relative_to(app))
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the app and archives go")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller", help="PyInstaller's cache")
    parser.add_argument("--no-archive", action="store_true", help="only the app's folder")
    args = parser.parse_args(argv)
    started = time.monotonic()
    app = run_pyinstaller(args.dist.resolve(), args.work.resolve())
    uv = add_uv(app)
    if uv is None:
        print("uv not found: the app will make its training environment with a Python it finds on the machine",
              file=sys.stderr)
    missing = unbundled_xcb_libraries(app) if sys.platform.startswith("linux") else []
    if missing:
        print(f"note: {', '.join(missing)} were not on this build machine, so the download does not carry them: "
              "desktops without them cannot open its window (the app names the packages). Install "
              "libxcb-icccm4 and libxcb-keysyms1 (Debian/Ubuntu) and build again to carry them.", file=sys.stderr)
    built = time.monotonic() - started
    archives: list[Path] = []
    if not args.no_archive:
        if sys.platform.startswith("linux"):
            archives.append(linux_archive(app, args.dist))
            image = appimage(app, args.dist)
            if image is None:
                print("AppImage skipped: appimagetool is not on PATH (no package registry offers it)", file=sys.stderr)
            else:
                archives.append(image)
        else:
            archives.append(zip_folder(app, args.dist, "windows" if sys.platform == "win32" else "macos"))
    print(json.dumps({
        "app": str(app), "app_mb": round(folder_mb(app), 1), "build_s": round(built, 1), "uv": str(uv) if uv else None,
        "archives": {str(a): round(a.stat().st_size / 1e6, 1) for a in archives},
        "total_s": round(time.monotonic() - started, 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
