"""`studio-train caption` on the demo folder, in-process: every mode, resume, stop, a crash mid-folder."""

from __future__ import annotations

import json
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from studio.caption import registry
from studio.caption.base import Captioner
from studio.caption.progress import PROGRESS_FILE, CaptionProgress
from studio.cli import main
from studio.core.dataset.captions.auto_caption import MachineCaption


def _captions(folder: Path) -> dict[str, str | None]:
    return {p.name: (p.with_suffix(".txt").read_text(encoding="utf-8").strip()
                     if p.with_suffix(".txt").exists() else None) for p in sorted(folder.glob("*.png"))}


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


def _caption(folder: Path, model: Path, *args: str) -> int:
    return main(["caption", str(folder), "--model", str(model), "--max-tokens", "6", *args])


@pytest.fixture(params=["tagger", "blip", "florence2"])
def model(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(f"tiny_{request.param}")  # type: ignore[no-any-return]


def test_fill_missing_captions_only_the_images_without_one_and_a_second_run_touches_nothing(
        demo_folder: Path, model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _captions(demo_folder)
    assert _caption(demo_folder, model, "--prefix", "sks") == 0
    after = _captions(demo_folder)
    missing = [name for name, text in before.items() if text is None]
    assert len(missing) == 3
    for name, text in after.items():
        if name in missing:
            assert text is not None and text.startswith("sks, ") and len(text) > len("sks, ")
        else:
            assert text == before[name]
    out, err = capsys.readouterr()
    assert "Captioned 3 of 3 images" in out
    assert f"Captioning 3 images with {model.name} on cpu in fp32, 4 a batch." in err  # a CPU run is never silent
    assert not (demo_folder / PROGRESS_FILE).exists()
    files = _snapshot(demo_folder)
    assert _caption(demo_folder, model, "--prefix", "sks") == 0
    assert _snapshot(demo_folder) == files  # not a byte, not an mtime
    assert "Nothing to caption: all 8 images have a caption" in capsys.readouterr().out


def test_append_keeps_the_persons_caption_first_and_replace_overwrites_it(
        demo_folder: Path, model: Path) -> None:
    before = _captions(demo_folder)
    assert _caption(demo_folder, model, "--mode", "append") == 0
    appended = _captions(demo_folder)
    for name, text in before.items():
        assert appended[name] is not None
        if text is not None:
            assert appended[name].startswith(text + ", ") and len(appended[name]) > len(text) + 2  # type: ignore[union-attr]
    assert _caption(demo_folder, model, "--mode", "replace", "--prefix", "sks") == 0
    replaced = _captions(demo_folder)
    assert all(text is not None and text.startswith("sks, ") for text in replaced.values())
    assert not any(before[name] and before[name] in text for name, text in replaced.items())  # type: ignore[operator]


def test_the_tagger_threshold_and_blacklist_decide_the_tags(demo_folder: Path, tiny_tagger: Path) -> None:
    assert _caption(demo_folder, tiny_tagger, "--mode", "replace", "--threshold", "0.45",
                    "--blacklist", "hatsune_miku, red") == 0
    for text in _captions(demo_folder).values():
        tags = text.split(", ")  # type: ignore[union-attr]
        assert "simple background" in tags  # scored 0.5
        assert not {"^_^", "hatsune miku", "red", "general"} & set(tags)  # 0.27, blacklisted, a rating
    assert _caption(demo_folder, tiny_tagger, "--mode", "replace", "--threshold", "0.6") == 0
    assert not any("simple background" in text for text in _captions(demo_folder).values())  # type: ignore[operator]


def test_a_dry_run_prints_json_lines_and_writes_nothing(demo_folder: Path, tiny_tagger: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    listed = demo_folder / "only.lst"
    listed.write_text("\r\n".join(str(p) for p in sorted(demo_folder.glob("*.png"))[:2]) + "\r\n",
                      encoding="utf-8-sig")  # as Notepad saves it: a BOM first
    files = _snapshot(demo_folder)
    assert _caption(demo_folder, tiny_tagger, "--mode", "replace", "--dry-run", "--json",
                    "--images-from", str(listed)) == 0
    assert _snapshot(demo_folder) == files
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["type"] for e in events] == ["started", "caption", "caption", "progress", "finished"]
    assert events[0]["total"] == 2 and events[-1]["status"] == "completed"
    caption = events[1]
    assert caption["written"] is False and caption["before"] is None and caption["after"].startswith("hatsune miku")
    assert {"red", "green", "blue", "bright colours"} & {tag for tag, _score, _cat in caption["tags"]}


def test_json_lines_are_ascii_whatever_the_folder_is_named(demo_folder: Path, tiny_tagger: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # The window reads these lines as UTF-8; Windows writes a pipe in its code page (cp1252, cp932), where
    # "ü" is no UTF-8 and "猫" cannot be written at all. Escaped, every line reads the same on any system.
    folder = demo_folder.rename(tmp_path / "Jürgen 猫")
    assert _caption(folder, tiny_tagger, "--dry-run", "--json") == 0
    out = capsys.readouterr().out
    assert out.isascii()
    events = [json.loads(line) for line in out.splitlines()]
    assert {Path(e["image"]).parent for e in events if e["type"] == "caption"} == {folder}


def test_mistakes_are_told_without_a_traceback(demo_folder: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["caption", str(demo_folder), "--model", "no-such-model"]) == 2
    assert "not a folder and not a known model name" in capsys.readouterr().err
    assert main(["caption", str(tmp_path / "nowhere"), "--model", "blip-base"]) == 2
    assert "is not a folder" in capsys.readouterr().err
    listed = tmp_path / "list.txt"
    listed.write_text(str(tmp_path / "elsewhere.png"), encoding="utf-8")
    assert main(["caption", str(demo_folder), "--model", "blip-base", "--images-from", str(listed)]) == 2
    assert "are not in the dataset" in capsys.readouterr().err
    assert main(["caption", str(demo_folder), "--model", "x", "--threshold", "2"]) == 2
    assert "between 0.1 and 1" in capsys.readouterr().err
    assert main(["caption", str(demo_folder), "--model", "x", "--device", "gpu"]) == 2
    assert "--device gpu is not a device: use auto, cpu, cuda or cuda:N" in capsys.readouterr().err


class _Scripted(Captioner):
    """Wraps a real captioner: records what it sees, and stops (SIGINT) or crashes at a given batch."""

    def __init__(self, inner: Captioner, seen: list[str], stop_at: int = 0, crash_at: int = 0) -> None:
        super().__init__(inner.source, inner.settings)
        self.kind, self.device, self.precision = inner.kind, inner.device, inner.precision
        self.inner, self.seen, self.stop_at, self.crash_at, self.batches = inner, seen, stop_at, crash_at, 0

    def caption(self, images: Sequence[tuple[Path, Any]]) -> list[MachineCaption]:
        self.batches += 1
        if self.batches == self.crash_at:
            raise RuntimeError("the model fell over")
        self.seen += [path.name for path, _ in images]
        if self.batches == self.stop_at:
            signal.raise_signal(signal.SIGINT)  # as Ctrl+C in the terminal
        return self.inner.caption(images)


def _scripted(monkeypatch: pytest.MonkeyPatch, **options: int) -> list[str]:
    seen: list[str] = []
    real = registry.load_captioner
    monkeypatch.setattr(registry, "load_captioner", lambda *a: _Scripted(real(*a), seen, **options))
    return seen


def test_a_stopped_job_resumes_where_it_stopped_and_appends_once(
        demo_folder: Path, tiny_tagger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = _captions(demo_folder)
    seen = _scripted(monkeypatch, stop_at=1)
    assert _caption(demo_folder, tiny_tagger, "--mode", "append", "--batch-size", "3") == 130
    assert len(seen) == 3 and (demo_folder / PROGRESS_FILE).exists()
    assert "Stopped. Run the same command again" in capsys.readouterr().out
    stopped = _captions(demo_folder)
    assert sum(stopped[n] != before[n] for n in before) == 3
    monkeypatch.undo()
    seen = _scripted(monkeypatch)
    assert _caption(demo_folder, tiny_tagger, "--mode", "append", "--batch-size", "3") == 0
    assert sorted(seen) == sorted(set(before) - set(sorted(before)[:3]))  # only the rest
    assert "Resuming: 3 images" in capsys.readouterr().err
    final = _captions(demo_folder)
    assert all(final[n] == stopped[n] for n in sorted(before)[:3])  # nothing appended twice
    assert all(final[n] != before[n] for n in before) and not (demo_folder / PROGRESS_FILE).exists()


def test_a_captioner_crashing_mid_folder_leaves_every_caption_file_whole(
        demo_folder: Path, tiny_tagger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = _captions(demo_folder)
    _scripted(monkeypatch, crash_at=2)
    assert _caption(demo_folder, tiny_tagger, "--mode", "replace", "--batch-size", "3", "--json") == 1
    out = capsys.readouterr()
    finished = json.loads(out.out.splitlines()[-1])
    assert finished["status"] == "failed" and "the model fell over" in finished["message"]
    assert "RuntimeError" in out.err
    first = sorted(before)[:3]
    crashed = _captions(demo_folder)
    for name, text in crashed.items():  # each file is the whole new caption or exactly the old one
        assert (text is not None and text.startswith("hatsune miku, ")) if name in first else text == before[name]
    assert not list(demo_folder.glob(".*.tmp"))
    monkeypatch.undo()
    assert _caption(demo_folder, tiny_tagger, "--mode", "replace", "--batch-size", "3") == 0
    assert all(text.startswith("hatsune miku, ") for text in _captions(demo_folder).values())  # type: ignore[union-attr]


def test_a_folder_that_cannot_be_written_is_told_plainly_and_nothing_changes(
        demo_folder: Path, tiny_tagger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from studio.caption import progress

    monkeypatch.setattr(progress, "write_texts_atomically",
                        lambda texts: {path: PermissionError(13, "Permission denied") for path in texts})
    files = _snapshot(demo_folder)
    assert _caption(demo_folder, tiny_tagger) == 1
    err = capsys.readouterr().err
    assert f"Cannot write {demo_folder / PROGRESS_FILE}: Permission denied. Make the folder writable" in err
    assert "Traceback" not in err
    assert _snapshot(demo_folder) == files


def test_the_progress_of_a_job_with_other_settings_is_started_over(tmp_path: Path) -> None:
    done, kept = tmp_path / "a.png", tmp_path / "sub" / "b.png"
    CaptionProgress.open(tmp_path, {"model": "m", "mode": "append"}).record({done: "a, tags", kept: None})
    again = CaptionProgress.open(tmp_path, {"model": "m", "mode": "append"})
    assert again.is_done(done, "a, tags") and again.is_done(kept, "whatever it has")
    assert not again.is_done(done, "a")  # its caption was never written: captioned again
    other = CaptionProgress.open(tmp_path, {"model": "m", "mode": "replace"})
    assert other.discarded_other_settings and not other.is_done(done, "a, tags")


def test_an_unreadable_image_is_skipped_and_long_captions_are_named(
        demo_folder: Path, tiny_tagger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = sorted(demo_folder.glob("*.png"))[0]
    broken.write_bytes(b"not a picture")
    long_prefix = ", ".join(f"word{i}" for i in range(40))  # 40 words, 39 commas and the digits: past 75 tokens
    assert _caption(demo_folder, tiny_tagger, "--prefix", long_prefix) == 0
    out, err = capsys.readouterr()
    assert f"Cannot read {broken}" in err and "The image was skipped" in err
    assert "Captioned 2 of 3 images" in out and "1 problem; see the messages above" in out
    assert "2 captions are longer than CLIP's 75 tokens" in out
    assert not broken.with_suffix(".txt").exists()


def test_a_projects_family_decides_which_captions_are_named_long(
        demo_folder: Path, tiny_tagger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Z-Image project's Qwen3 encoder reads 512 tokens: a caption of about 120 is not long there."""
    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.core.project.folder import create_project

    config = TrainConfig(model=ModelSection(family="zimage", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_folder))]))
    project = create_project(demo_folder.parent / "project", config).root
    long_prefix = ", ".join(f"word{i}" for i in range(40))  # past CLIP's 75 tokens, far from 512
    assert _caption(project, tiny_tagger, "--prefix", long_prefix) == 0
    assert "longer than" not in capsys.readouterr().out
    longer_prefix = ", ".join(f"word{i}" for i in range(200))
    assert _caption(project, tiny_tagger, "--prefix", longer_prefix, "--mode", "replace") == 0
    assert "captions are longer than Qwen3's 512 tokens" in capsys.readouterr().out


def test_an_sd3_project_without_t5_names_captions_past_clips_75_tokens(
        demo_folder: Path, tiny_tagger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SD3 declares T5's 256 tokens, but with model.use_t5 off (its default) the CLIP encoders read 75."""
    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.core.project.folder import create_project

    config = TrainConfig(model=ModelSection(family="sd3", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_folder))]))
    project = create_project(demo_folder.parent / "project", config).root
    long_prefix = ", ".join(f"word{i}" for i in range(40))  # past CLIP's 75 tokens, within T5's 256
    assert _caption(project, tiny_tagger, "--prefix", long_prefix) == 0
    assert "captions are longer than CLIP's 75 tokens" in capsys.readouterr().out


def test_an_image_larger_than_pillow_opens_is_skipped_and_the_rest_captioned(
        demo_folder: Path, tiny_tagger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A 300-megapixel scan among 2,000 photos is named and skipped; it does not stop the job."""
    from PIL import Image

    huge = sorted(demo_folder.glob("*.png"))[0]
    Image.new("RGB", (400, 400), (200, 30, 30)).save(huge)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 128 * 128)  # the demo's 128x128 open; 400x400 is past twice that
    assert _caption(demo_folder, tiny_tagger) == 0
    out, err = capsys.readouterr()
    assert f"Cannot read {huge}" in err and "decompression bomb" in err and "Traceback" not in err
    assert "Captioned 2 of 3 images" in out and "1 problem; see the messages above" in out
    assert not huge.with_suffix(".txt").exists()


def test_an_edit_projects_control_images_get_no_caption(tmp_path: Path, tiny_tagger: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The targets are captioned (their caption is the instruction); control/ beside them is left as it is."""
    from PIL import Image

    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.core.project.folder import create_project

    pairs = tmp_path / "pairs"
    (pairs / "control").mkdir(parents=True)
    for name in ("day", "night"):
        Image.new("RGB", (32, 32), (220, 40, 40)).save(pairs / f"{name}.png")
        Image.new("RGB", (32, 32), (40, 70, 220)).save(pairs / "control" / f"{name}.png")
    config = TrainConfig(model=ModelSection(family="flux2-klein", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(pairs))], kind="edit"))
    project = create_project(tmp_path / "project", config).root
    assert _caption(project, tiny_tagger) == 0
    assert "Captioned 2 of 2 images" in capsys.readouterr().out
    assert sorted(p.relative_to(pairs).as_posix() for p in pairs.rglob("*.txt")) == ["day.txt", "night.txt"]


@pytest.mark.parametrize("batch_size", ["1", "4"])
def test_two_images_named_alike_get_one_caption_and_the_other_is_named(
        tmp_path: Path, tiny_tagger: Path, batch_size: str, capsys: pytest.CaptureFixture[str]) -> None:
    """photo.jpg and photo.png both train with photo.txt: the first is captioned, the second is named, not
    written over the first's caption (in one batch) nor called a change by another program (in the next)."""
    from PIL import Image

    Image.new("RGB", (32, 32), (40, 70, 220)).save(tmp_path / "photo.jpg")
    Image.new("RGB", (32, 32), (220, 40, 40)).save(tmp_path / "photo.png")
    assert _caption(tmp_path, tiny_tagger, "--batch-size", batch_size) == 0
    out, err = capsys.readouterr()
    tags = (tmp_path / "photo.txt").read_text(encoding="utf-8").split(", ")
    assert "blue" in tags and "red" not in tags  # photo.jpg's, first in the folder
    assert f"{tmp_path / 'photo.png'} was not captioned: it is named as photo.jpg, so the two share one " \
           "caption file (photo.txt)" in err
    assert "changed by another program" not in err
    assert "Captioned 1 of 1 images" in out and "wrote 1 captions" in out and "1 problem" in out


def test_a_stop_asked_while_the_model_loads_captions_nothing(
        demo_folder: Path, tiny_tagger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    files = _snapshot(demo_folder)
    real = registry.load_captioner

    def load_then_ctrl_c(*args: Any) -> Captioner:
        captioner = real(*args)
        signal.raise_signal(signal.SIGINT)  # Ctrl+C while a large model loads
        return captioner

    monkeypatch.setattr(registry, "load_captioner", load_then_ctrl_c)
    assert _caption(demo_folder, tiny_tagger, "--batch-size", "2") == 130
    assert "Captioned 0 of 3 images" in capsys.readouterr().out
    assert {n: f for n, f in _snapshot(demo_folder).items() if n != PROGRESS_FILE} == files


def test_a_projects_images_on_another_drive_are_captioned_and_resumed(
        demo_folder: Path, tiny_tagger: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows: a project on D: with its images on E: (relpath raises ValueError there)."""
    import os

    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.core.project.folder import create_project

    config = TrainConfig(model=ModelSection(family="sd15", base="org/model"),
                         dataset=DatasetSection(concepts=[ConceptSection(path=str(demo_folder))]))
    project = create_project(tmp_path / "project", config).root
    real = os.path.relpath

    def relpath(path: Any, start: Any = None) -> str:
        if Path(path).is_relative_to(demo_folder) and not Path(str(start)).is_relative_to(demo_folder):
            raise ValueError("path is on mount 'E:', start on mount 'D:'")
        return real(path, start)

    monkeypatch.setattr(os.path, "relpath", relpath)
    seen = _scripted(monkeypatch, stop_at=1)
    assert _caption(project, tiny_tagger, "--batch-size", "2") == 130
    assert len(seen) == 2
    monkeypatch.undo()
    monkeypatch.setattr(os.path, "relpath", relpath)
    seen = _scripted(monkeypatch)
    assert _caption(project, tiny_tagger, "--batch-size", "2") == 0
    assert len(seen) == 1 and all(text is not None for text in _captions(demo_folder).values())


@pytest.mark.parametrize(("source", "reads"), [("folder", "its folder's name"), ("prompt", "its instance prompt"),
                                               ("caption", ".caption files only")])
def test_captions_a_concept_would_never_train_are_refused_before_the_model_runs(
        demo_folder: Path, tiny_tagger: Path, source: str, reads: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A concept that reads its folder's name, its prompt or .caption files trains none of the .txt files a model
    writes: 'wrote 8 captions' would be untrue in every way that matters, run after run."""
    from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection, TrainConfig
    from studio.core.project.folder import create_project

    concept = ConceptSection(path=str(demo_folder), caption_source=source, instance_prompt="photo of sks")  # type: ignore[arg-type]
    config = TrainConfig(model=ModelSection(family="sd15", base="org/model"),
                         dataset=DatasetSection(concepts=[concept]))
    project = create_project(demo_folder.parent / "project", config).root
    files = _snapshot(demo_folder)
    assert _caption(project, tiny_tagger, "--mode", "replace") == 2
    err = capsys.readouterr().err
    assert f"The concept {demo_folder} reads its captions from {reads} (caption_source = \"{source}\"): the " in err
    assert "would never be trained. Set the concept's caption_source to auto" in err
    assert _snapshot(demo_folder) == files
