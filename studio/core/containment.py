"""Names that arrive from outside become paths here, and only inside the folder they are meant for.

A remote machine's file list and sample events, a server's ETag and file names, the members of
an archive and the entries of an imported folder are written by someone else. Whoever controls
them must not be able to reach beside the folder they land in (`../../studio.toml`,
`~/.bashrc`): `contained_path` is the one gate every such name passes before it is joined to a
folder, read or written.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path, PurePosixPath

_DRIVE = re.compile(r"^[A-Za-z]:")
# Names Windows gives to devices: a file named so (with any extension: nul.safetensors, con.txt) opens the
# device instead, or cannot be made. COM¹ and the like count too.
WINDOWS_DEVICES = frozenset({"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$",
                             *(f"{port}{n}" for port in ("COM", "LPT") for n in "0123456789\u00b9\u00b2\u00b3")})


class OutsideFolderError(ValueError):
    """A name from outside that would leave its folder; the message names the entry and why."""

    def __init__(self, name: str, folder: Path, why: str, source: str = "") -> None:
        self.name, self.folder, self.why = name, folder, why
        where = f"{source}: " if source else ""
        super().__init__(f"{where}refused {name!r}: {why}; only names inside {folder} are accepted, "
                         "nothing was written there for it")


def name_parts(name: str, folder: Path, source: str = "") -> tuple[str, ...]:
    """The parts of a relative name; refuses what could point anywhere but below a folder."""
    if not isinstance(name, str) or not name:
        raise OutsideFolderError(str(name), folder, "the name is empty", source)
    if "\x00" in name:
        raise OutsideFolderError(name, folder, "the name holds a NUL character", source)
    # Both separators count: a backslash is a folder on Windows and in archives made there.
    unified = name.replace("\\", "/")
    if unified.startswith("/") or _DRIVE.match(unified):
        raise OutsideFolderError(name, folder, "the name is absolute", source)
    parts = tuple(p for p in PurePosixPath(unified).parts if p not in ("", "."))
    if ".." in parts:
        raise OutsideFolderError(name, folder, "the name climbs out with '..'", source)
    if any(":" in p for p in parts):  # NTFS streams and drive-relative names
        raise OutsideFolderError(name, folder, "the name holds ':'", source)
    if not parts:
        raise OutsideFolderError(name, folder, "the name is the folder itself", source)
    return parts


def windows_refusal(name: str) -> str | None:
    """Why Windows cannot hold `name` as a file or folder name of its own, or None when it can.

    Checked on every OS: a project travels, and a run named `nul` on Linux writes nothing on the Windows
    machine it is copied to. Said as "... is a device name on Windows", to follow the name in a message."""
    device = name.split(".", 1)[0].rstrip(" ").upper()
    if device in WINDOWS_DEVICES:
        return f"is {device}, a device name on Windows (a file named so opens the device; nothing is written)"
    if name.endswith((".", " ")):
        return "ends in a dot or a space, which Windows drops from a file or folder name"
    return None


def contained_path(folder: str | Path, name: str, source: str = "") -> Path:
    """`folder / name` for a `name` that arrived from outside, once it is sure to stay inside `folder`.

    Refused (OutsideFolderError, naming the entry and `source`): empty names, absolute names,
    drive letters, any `..`, and a name that reaches out through a link already on disk (a
    folder or the file itself linking beside `folder`). The returned path is not resolved, so a
    link inside the folder to elsewhere inside it stays the person's link.
    """
    root = Path(folder)
    parts = name_parts(name, root, source)
    target = root.joinpath(*parts)
    real_root = Path(os.path.realpath(root))
    real_target = Path(os.path.realpath(target))
    if real_target != real_root and real_root not in real_target.parents:
        raise OutsideFolderError(name, root, f"a link on the way leads to {real_target}", source)
    return target


def is_link_out(link: Path, folder: Path) -> bool:
    """Whether a symbolic link leads beside `folder` (or nowhere): one an import must not copy."""
    real_root = Path(os.path.realpath(folder))
    real = Path(os.path.realpath(link))
    return real != real_root and real_root not in real.parents


def link_stays_inside(link_text: str, link_name: str) -> bool:
    """Whether a link's own text names a place inside its folder wherever that folder lies: relative,
    and never climbing above the folder from `link_name` (the link's relative name in the folder).
    An absolute link to a file of the folder fails: copied elsewhere, it would still name the original."""
    text = link_text.replace("\\", "/")
    if text.startswith("/") or _DRIVE.match(text) or "\x00" in text:
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(link_name), text))
    return joined != ".." and not joined.startswith("../") and not joined.startswith("/")
