"""A send cut off midway says to run it again (only what is missing travels), in the studio's words."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from studio.core.remote.ssh import Completed, RemoteError
from studio.core.remote.transfer import LocalFile, send_files


class _CutClient:
    """A machine that compares files, then drops the connection while rsync or sftp copies."""

    machine = SimpleNamespace(name="pod", host="pod.example")

    def options(self) -> list[str]:
        return []

    def python(self, code: str, doing: str, **_kw: Any) -> Completed:
        return Completed(0, json.dumps({"have": {}, "removed": []}) + "\n", "")

    def call(self, argv: list[str], doing: str, *_args: Any, **_kw: Any) -> Completed:
        raise RemoteError(f"{doing} on pod failed (exit status 255): rsync: [sender] write error: Broken pipe (32)\n"
                          "rsync error: unexplained error (code 255) at io.c(848) [sender=3.2.7]")


@pytest.mark.parametrize("rsync", [True, False], ids=["rsync", "sftp"])
def test_a_cut_send_says_to_run_it_again(tmp_path: Path, rsync: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    image = tmp_path / "a.png"
    image.write_bytes(b"\x89PNG not really")
    with pytest.raises(RemoteError) as caught:
        send_files(_CutClient(), [LocalFile(image, "data/a.png")], "/workspace/demo", rsync)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "Broken pipe" in message  # what the tool said stays
    assert message.endswith("The copy to pod was cut off: run it again, only what is missing is sent.")
