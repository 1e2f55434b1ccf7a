"""Programs the studio starts without a console window of their own (Windows).

The desktop app is a windowed program on Windows: it has no console, so every console program it
starts through `subprocess` (uv and pip during the training environment's install, the training
Python's probes, nvidia-smi, ssh and sftp for a remote run) would open a black window of its own
for as long as it runs. Qt's QProcess starts its programs without one; `creationflags=no_window()`
does the same for `subprocess`. Elsewhere it is 0, the default.
"""

from __future__ import annotations

import subprocess
import sys

_CREATE_NO_WINDOW = 0x08000000  # subprocess.CREATE_NO_WINDOW, which exists on Windows only


def no_window(creationflags: int = 0) -> int:
    """`subprocess`'s creationflags that start a console program without a window (Windows; with its other
    `creationflags`); 0 elsewhere."""
    if sys.platform != "win32":
        return 0
    return creationflags | getattr(subprocess, "CREATE_NO_WINDOW", _CREATE_NO_WINDOW)
