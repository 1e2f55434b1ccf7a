"""The double-click launcher of a source checkout: it looks past macOS's python3 3.9 for a 3.11+,
and when there is none it says which to install and keeps the window open to be read."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the POSIX launcher")


def test_with_only_an_old_python_it_names_the_versions_and_waits(tmp_path: Path) -> None:
    old = next(iter(sorted(glob.glob("/root/.pyenv/versions/3.9*/bin/python3")) + ([shutil.which("python3.9")]
                                                                                     if shutil.which("python3.9")
                                                                                     else [])), None)
    if old is None:
        pytest.skip("no Python 3.9 here to stand in for macOS's")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(old)
    for tool in ("dirname",):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    out = subprocess.run(["/bin/bash", str(ROOT / "packaging" / "studio.command")], capture_output=True,
                         text=True, input="\n", timeout=30, env={"PATH": str(bin_dir), "HOME": str(tmp_path)})
    assert out.returncode == 1
    assert "needs Python 3.11, 3.12 or 3.13, and none was found (python3 is Python 3.9" in out.stdout
    assert "Press Enter to close this window." in out.stdout + out.stderr
