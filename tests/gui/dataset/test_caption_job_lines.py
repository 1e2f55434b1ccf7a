"""The caption job's stdout read as protocol messages through the runner's process wrapper."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fixtures.fake_child import fake_python

from studio.gui.dataset.captions.job import CaptionJob

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the stand-in child is a shell script")


def test_a_malformed_line_is_skipped_and_counted_and_the_job_goes_on(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lines = [
        "a library printing on stdout",
        json.dumps({"type": "progress", "done": "two", "total": 4}),  # used to raise int("two") in a slot
        json.dumps({"type": "caption", "image": str(tmp_path / "a.png"), "tags": [["red", "high", "general"]]}),
        json.dumps({"type": "caption", "image": str(tmp_path / "b.png"), "tags": [["red", 0.9, "general"]],
                    "after": "red"}),
        json.dumps({"type": "progress", "done": 2, "total": 2}),
        json.dumps({"type": "finished", "status": "completed", "captioned": 2}),
    ]
    job = CaptionJob()
    progress: list[tuple[int, int]] = []
    captions: list[object] = []
    job.sig_progress.connect(lambda done, total: progress.append((done, total)))
    job.sig_caption.connect(captions.append)
    with qtbot.waitSignal(job.sig_finished, timeout=20000) as finished:
        job.start(str(fake_python(tmp_path / "bin", lines)), tmp_path, "tagger", "fill-missing", [tmp_path / "a.png"])
    assert finished.args == ["completed", ""]
    assert progress == [(2, 2)] and [c.image.name for c in captions] == ["b.png"]  # type: ignore[attr-defined]
    assert job.malformed_lines == 1 and not job.running


def test_a_job_that_dies_says_its_last_words(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = CaptionJob()
    program = fake_python(tmp_path / "bin", [], exit_code=3, stderr="loading\nRuntimeError: no model here\n")
    with qtbot.waitSignal(job.sig_finished, timeout=20000) as finished:
        job.start(str(program), tmp_path, "tagger", "fill-missing", [tmp_path / "a.png"])
    assert finished.args == ["failed", "The captioning process ended unexpectedly: RuntimeError: no model here"]
