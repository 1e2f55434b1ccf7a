"""`studio-train caption` writing a folder while another process edits the same captions: no edit is lost.

The editor follows the job's front (the first file it has not written yet) and edits files
of the batch being written, each once: half the time as another program would (a new file
renamed over the old one, or the file rewritten in place), half the time through the
Dataset page's caption store. Every edit that its writer saw succeed must be on disk at the
end; the job reports the ones it did not write as conflicts.

The job waits after recording each batch until the editor has made its edits of that batch
(a handshake file), so every batch is raced on a fast machine and on a loaded one alike,
instead of the editor catching the job only when the machine happens to be slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fixtures.waits import scaled_s
from PIL import Image

from studio.cli import main

REPO = Path(__file__).resolve().parents[2]
IMAGES = 160
BATCH = 16

_EDITOR = textwrap.dedent("""
    import json, os, random, sys, time
    from pathlib import Path
    from studio.core.config.schema import ConceptSection
    from studio.core.dataset.captions.caption_store import CaptionStore
    from studio.core.dataset.scan import scan_concept

    root, batch, seed, handshake = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    rng = random.Random(seed)
    store = CaptionStore(scan_concept(ConceptSection(path=str(root))))
    images = sorted(store.entries, key=str)
    progress = root / ".studio-caption-progress.json"
    edits, edited, front, seen = [], set(), 0, None
    print("ready", flush=True)
    deadline = time.monotonic() + 600

    def edit(index):
        edited.add(index)
        image = images[index]
        sidecar = image.with_suffix(".txt")
        text, how = f"edited {index} by hand", rng.choice(["rename", "in-place", "store"])
        if how == "rename":
            tmp = sidecar.with_name(sidecar.name + ".editor")
            tmp.write_text(text)
            os.replace(tmp, sidecar)
            outcome = "saved"
        elif how == "in-place":
            with open(sidecar, "w") as handle:
                handle.write(text)
            outcome = "saved"
        else:
            store.set_caption(image, text)
            report = store.flush([image])
            outcome = "saved" if report.saved else "conflict" if report.conflicts else "error"
            for conflict in report.conflicts:
                store.take_disk_text(conflict)
        edits.append({"file": str(sidecar), "text": text, "how": how, "outcome": outcome})

    while front < len(images) and time.monotonic() < deadline:
        # The job records a batch in its progress file just before it saves that batch: edit then.
        try:
            stamp = progress.stat().st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if stamp is None and seen is not None:
            break  # the job finished (its progress file is gone)
        if stamp is None or stamp == seen:
            time.sleep(0.0002)
            continue
        seen = stamp
        # The job's front: the first file neither written by it nor edited here.
        while front < len(images) and (front in edited or not images[front].with_suffix(".txt").read_text()
                                       .startswith("original")):
            front += 1
        ahead = [i for i in range(front, min(front + batch, len(images))) if i not in edited]
        for index in rng.sample(ahead, min(len(ahead), 4)):
            time.sleep(rng.random() * 0.002)
            edit(index)
        handshake.write_text(str(stamp))  # this batch is edited: the job may save it
        rest = [i for i in ahead if i not in edited]
        if rest:
            edit(rng.choice(rest))  # and one more while it saves: a true race, whichever wins
    print(json.dumps(edits), flush=True)
""")


def _dataset(folder: Path) -> None:
    folder.mkdir()
    for i in range(IMAGES):
        Image.new("RGB", (8, 8), (i % 256, 40, 200)).save(folder / f"{i:04d}.png")
        (folder / f"{i:04d}.txt").write_text(f"original {i}", encoding="utf-8")


def _wait_for_the_editor(monkeypatch: pytest.MonkeyPatch, handshake: Path) -> None:
    """After the job records a batch (what the editor watches), it waits until the editor has edited it."""
    from studio.caption.progress import CaptionProgress

    record = CaptionProgress.record

    def record_then_wait(self: CaptionProgress, *args: object, **kwargs: object) -> None:
        record(self, *args, **kwargs)  # type: ignore[arg-type]
        stamp = str(self.path.stat().st_mtime_ns)
        deadline = time.monotonic() + scaled_s(60)
        while time.monotonic() < deadline and not (handshake.is_file() and handshake.read_text() == stamp):
            time.sleep(0.001)

    monkeypatch.setattr(CaptionProgress, "record", record_then_wait)


def test_no_edit_is_lost_to_a_caption_job_writing_the_same_folder(
        tmp_path: Path, tiny_tagger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "race"
    _dataset(folder)
    handshake = tmp_path / "edited-batch"
    _wait_for_the_editor(monkeypatch, handshake)
    editor = subprocess.Popen([sys.executable, "-c", _EDITOR, str(folder), str(BATCH), "7", str(handshake)],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert editor.stdout is not None
        assert editor.stdout.readline().strip() == "ready"
        code = main(["caption", str(folder), "--model", str(tiny_tagger), "--mode", "replace", "--json",
                     "--batch-size", str(BATCH), "--device", "cpu"])
        edits = json.loads(editor.stdout.readline())
    finally:
        editor.kill()
        editor.wait(30)
        if editor.stdout is not None:
            editor.stdout.close()
    assert code == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    written = {Path(e["image"]).with_suffix(".txt"): e["after"] for e in events
               if e["type"] == "caption" and e["written"]}
    conflicts = [e["message"] for e in events if e["type"] == "warning" and "changed by another program" in e["message"]]
    final = {p: p.read_text(encoding="utf-8") for p in folder.glob("*.txt")}
    kept = [e for e in edits if e["outcome"] == "saved"]
    lost = [e for e in kept if final[Path(e["file"])] != e["text"]]
    edited = {Path(e["file"]) for e in edits}
    assert len(edits) >= 20, f"the editor made only {len(edits)} edits: the race was not run"
    assert lost == [], f"{len(lost)} of {len(kept)} edits lost: {lost[:3]}"
    # The job's own captions stand wherever nobody edited, and every file is the job's or an edit.
    assert all(final[p] == text for p, text in written.items() if p not in edited)
    assert all(text.startswith("edited") or text == written.get(p) for p, text in final.items())
    print(f"{len(edits)} edits ({len(kept)} saved), {len(conflicts)} reported as conflicts by the job, "
          f"{sum(e['outcome'] == 'conflict' for e in edits)} by the store")
