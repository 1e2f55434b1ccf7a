"""Before the window opens on Linux: the system libraries Qt's X11 (xcb) platform plugin needs,
named by file when they are missing.

Without one of them Qt prints 'could not load the Qt platform plugin "xcb"', often blames
libxcb-cursor0 whatever is missing, and aborts the process. The studio reads the plugin's list
of needed libraries first (the ELF file's DT_NEEDED entries), loads each as the system's loader
would, and names the missing files and the Debian/Ubuntu packages that hold them.
"""

from __future__ import annotations

import ctypes
import struct
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB = 0, 1, 5
# Where a library's Debian package name does not follow from its file name.
PACKAGES = {"libglib-2.0.so.0": "libglib2.0-0", "libgthread-2.0.so.0": "libglib2.0-0", "libz.so.1": "zlib1g",
            "libstdc++.so.6": "libstdc++6", "libgcc_s.so.1": "libgcc-s1", "libc.so.6": "libc6", "libm.so.6": "libc6"}


def needed_libraries(path: Path) -> list[str]:
    """The DT_NEEDED entries of a 64-bit little-endian ELF file (other files: none)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, size) of each loaded segment
    dynamic = None
    for index in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + index * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []
    needed: list[int] = []
    strtab = None
    for at in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed.append(value)
        elif tag == DT_STRTAB:
            strtab = next((value - vaddr + offset for vaddr, offset, size in loads if vaddr <= value < vaddr + size), None)
    if strtab is None:
        return []
    return [data[strtab + n:data.index(b"\0", strtab + n)].decode() for n in needed]


def package_of(library: str) -> str:
    """The Debian/Ubuntu package that usually holds a library: libxcb-icccm.so.4 -> libxcb-icccm4."""
    if library in PACKAGES:
        return PACKAGES[library]
    stem, _, version = library.partition(".so.")
    stem = stem.lower()
    major = version.split(".")[0]
    return f"{stem}{'-' if stem[-1:].isdigit() else ''}{major}"


def uses_xcb(environ: Mapping[str, str]) -> bool:
    """Whether Qt will load the xcb plugin: asked for by name, or the default outside a Wayland session."""
    platform = environ.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.split(";")[0].startswith("xcb")
    return not (environ.get("WAYLAND_DISPLAY") and environ.get("XDG_SESSION_TYPE") == "wayland")


def load_library(name: str) -> None:
    """Load a library as the system's loader does (raises OSError naming what is missing)."""
    ctypes.CDLL(name)


def missing_libraries(qt_dir: Path, load: Callable[[str], object] | None = None) -> list[str]:
    """The system libraries the xcb plugin needs that cannot be loaded, by file name (the library
    a needed one lacks is named rather than the one that needs it)."""
    load = load or load_library
    bundled = qt_dir / "lib"
    files = [qt_dir / "plugins" / "platforms" / "libqxcb.so", bundled / "libQt6XcbQpa.so.6"]
    missing: list[str] = []
    for file in files:
        if not file.is_file():
            continue
        for library in needed_libraries(file):
            if (bundled / library).exists() or library in missing:
                continue
            try:
                load(library)
            except OSError as exc:
                # dlopen says "libxcb-icccm.so.4: cannot open shared object file: ..."
                named = str(exc).split(":")[0].strip()
                lacking = named if named.startswith("lib") and ".so" in named else library
                if lacking not in missing:
                    missing.append(lacking)
    return missing


def missing_qt_libraries_message(environ: Mapping[str, str], qt_dir: Path | None = None,
                                 load: Callable[[str], object] | None = None) -> str | None:
    """What to tell a person whose Linux lacks libraries the window needs; None when nothing is missing."""
    if not sys.platform.startswith("linux") or not uses_xcb(environ):
        return None
    if qt_dir is None:
        import PySide6  # the package only: no Qt library is loaded here

        qt_dir = Path(PySide6.__file__).parent / "Qt"
    missing = sorted(missing_libraries(qt_dir, load))
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(package_of(library) for library in missing))
    return ("The studio's window cannot open: Qt's X11 platform plugin (xcb) needs system libraries "
            f"that are not installed: {', '.join(missing)}.\n"
            f"On Debian or Ubuntu install them with:\n    sudo apt install {packages}\n"
            "(README.md, 'Linux system packages', lists every package Qt needs.)")
