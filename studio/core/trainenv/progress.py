"""Progress of an install read from pip's or uv's output: which package, how many bytes.

pip prints `Collecting NAME`, `Downloading FILE (800.5 MB)` and, from 24.1 with
`--progress-bar raw`, `Progress DONE of TOTAL`; uv prints `Downloading NAME (800.5MiB)`
and ` Downloaded NAME`. A download counts in full once the next line comes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_SIZE = r"\(\s*([\d.]+)\s*([KMG]i?B|bytes|B)\s*\)"
_PIP_DOWNLOAD = re.compile(r"^\s*Downloading\s+(?:\S*/)?([A-Za-z0-9][A-Za-z0-9._+%-]*?)(?:-\d[^\s]*)?\.(?:whl|tar\.gz|zip)\s*" + _SIZE)
_UV_DOWNLOAD = re.compile(r"^\s*Downloading\s+([A-Za-z0-9][A-Za-z0-9._-]*)\s+" + _SIZE)
_UV_DONE = re.compile(r"^\s*Downloaded\s+([A-Za-z0-9][A-Za-z0-9._-]*)\s*$")
_COLLECTING = re.compile(r"^\s*(?:Collecting|Processing)\s+(?:\S*/)?([A-Za-z0-9][A-Za-z0-9_.-]*?)(?:[<>=!~ ;\[(]|-\d|$)")
_RAW = re.compile(r"^\s*Progress\s+(\d+)\s+of\s+(\d+)\s*$")


def size_in_bytes(number: str, unit: str) -> int:
    unit = unit.lower()
    return int(float(number) * _UNITS.get("b" if unit == "bytes" else unit, 1))


@dataclass(frozen=True)
class InstallProgress:
    step: str  # create, torch, packages, link, verify
    index: int  # 1-based
    count: int
    package: str | None = None
    bytes_done: int = 0
    bytes_total: int | None = None  # of the downloads announced so far
    line: str = ""

    def describe(self) -> str:
        text = f"step {self.index} of {self.count}: {self.step}"
        if self.package:
            text += f", {self.package}"
        if self.bytes_total:
            text += f", {self.bytes_done / 1e6:.1f} of {self.bytes_total / 1e6:.1f} MB"
        return text


class OutputReader:
    """Turns one step's output lines into InstallProgress."""

    def __init__(self, start: InstallProgress) -> None:
        self.state = start
        self._done = 0  # bytes of downloads finished
        self._current = 0  # size of the download in flight

    def _finish_current(self) -> None:
        self._done += self._current
        self._current = 0

    def feed(self, line: str) -> InstallProgress:
        text = line.rstrip("\r\n")
        raw = _RAW.match(text)
        if raw:
            done = self._done + int(raw.group(1))
            self.state = replace(self.state, bytes_done=done, line=text)
            return self.state
        download = _PIP_DOWNLOAD.match(text) or _UV_DOWNLOAD.match(text)
        if download:
            self._finish_current()
            self._current = size_in_bytes(download.group(2), download.group(3))
            total = (self.state.bytes_total or 0) + self._current
            self.state = replace(self.state, package=_clean(download.group(1)), bytes_total=total,
                                 bytes_done=self._done, line=text)
            return self.state
        self._finish_current()
        named = _UV_DONE.match(text) or _COLLECTING.match(text)
        package = _clean(named.group(1)) if named else self.state.package
        self.state = replace(self.state, package=package, bytes_done=self._done, line=text)
        return self.state


def _clean(name: str) -> str:
    """A distribution's name as people write it (file names spell `nvidia-ml-py` as `nvidia_ml_py`)."""
    return name.replace("%2B", "+").rstrip(".-_").replace("_", "-")
