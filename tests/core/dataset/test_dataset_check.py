from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dataset_files import MakeDataset, make_image, png_header_only
from PIL import Image

from studio.cli import main as cli_main
from studio.core.config.schema import ConceptSection
from studio.core.dataset.checks import CheckReport, check_concepts


def check(root: Path, resolution: int = 32) -> CheckReport:
    return check_concepts([ConceptSection(path=str(root))], None, resolution)


def codes(report: CheckReport, name: str) -> dict[str, str]:
    """{code: severity} of the problems of one file (by file name)."""
    return {p.code: p.severity for p in report.problems if Path(p.path).name == name}


def test_clean_dataset_has_no_problems(make_dataset: MakeDataset) -> None:
    report = check(make_dataset({"a.png": "a red square", "b.jpg": "a blue square"}))
    assert report.images == 2 and report.problems == []


def test_unreadable_zero_bytes_and_truncated(make_dataset: MakeDataset) -> None:
    root = make_dataset({"ok.png": "x"})
    (root / "zero.png").write_bytes(b"")
    (root / "zero.txt").write_text("x")
    (root / "junk.jpg").write_bytes(b"this is not an image")
    (root / "junk.txt").write_text("x")
    good = root / "cut.jpg"
    Image.effect_noise((128, 128), 60).convert("RGB").save(good)
    (root / "cut.txt").write_text("x")
    data = good.read_bytes()
    good.write_bytes(data[: len(data) // 2])
    report = check(root)
    assert codes(report, "zero.png") == {"unreadable_image": "error"}
    assert "0 bytes" in report.by_path()[str(root / "zero.png")][0].message
    assert codes(report, "junk.jpg") == {"unreadable_image": "error"}
    assert codes(report, "cut.jpg") == {"truncated_image": "error"}
    assert codes(report, "ok.png") == {}


def test_size_aspect_huge_and_modes(make_dataset: MakeDataset) -> None:
    root = make_dataset({})
    for name, size in (("small.png", (16, 16)), ("wide.png", (400, 100)), ("fine.png", (64, 64))):
        make_image(root / name, size=size)
    png_header_only(root / "huge.png", 9000, 9000)
    png_header_only(root / "bomb.png", 20000, 20000)
    Image.new("CMYK", (64, 64)).save(root / "cmyk.jpg")
    Image.new("I;16", (64, 64)).save(root / "deep.png")
    for img in root.glob("*.*"):
        img.with_suffix(".txt").write_text("caption")
    report = check(root, resolution=32)
    assert codes(report, "small.png") == {"too_small": "warning"}
    assert codes(report, "wide.png") == {"extreme_aspect": "warning"}
    assert "9000x9000" in str(report.by_path()[str(root / "huge.png")])
    assert "huge_image" in codes(report, "huge.png")
    # Pillow refuses to open it (a decompression bomb), so the trainer skips it: an error, not a warning.
    assert codes(report, "bomb.png") == {"untrainable_size": "error"}
    assert "20000x20000" in str(report.by_path()[str(root / "bomb.png")])
    assert codes(report, "cmyk.jpg") == {"unusual_mode": "warning"}
    assert "unusual_mode" in codes(report, "deep.png")
    assert codes(report, "fine.png") == {}


def test_exif_rotation_counts_for_aspect(make_dataset: MakeDataset) -> None:
    root = make_dataset({})
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (400, 100)).save(root / "r.jpg", exif=exif)
    (root / "r.txt").write_text("x")
    (problem,) = check(root).problems
    assert problem.code == "extreme_aspect" and "100x400" in problem.message


def _png_with_exif_after_pixels(path: Path, size: tuple[int, int]) -> Path:
    """A PNG turned by an eXIf chunk that comes after its pixel data, as some programs write it."""
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", size).save(path, exif=exif)
    data, chunks, at = path.read_bytes(), [], 8
    while at < len(data):
        end = at + 12 + int.from_bytes(data[at:at + 4], "big")
        chunks.append(data[at:end])
        at = end
    late = [c for c in chunks if c[4:8] == b"eXIf"]
    rest = [c for c in chunks if c[4:8] != b"eXIf"]
    path.write_bytes(data[:8] + b"".join(rest[:-1] + late + rest[-1:]))
    return path


def test_png_sizes_are_read_without_decoding_the_pictures(make_dataset: MakeDataset,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A check of thousands of PNGs read each picture whole (Pillow decodes a PNG to look for EXIF after it)."""
    from PIL import PngImagePlugin

    root = make_dataset({"plain.png": "x", "late.png": "x"})
    make_image(root / "plain.png", size=(400, 300))
    _png_with_exif_after_pixels(root / "late.png", (300, 100))
    decoded: list[str] = []
    load = PngImagePlugin.PngImageFile.load

    def counting_load(self: PngImagePlugin.PngImageFile) -> object:
        decoded.append(Path(str(self.filename)).name)
        return load(self)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", counting_load)
    report = check(root, resolution=32)
    assert report.sizes[root / "plain.png"] == (400, 300)
    assert report.sizes[root / "late.png"] == (100, 300)  # turned as the trainer turns it
    assert decoded == ["late.png"]


def test_caption_rules(make_dataset: MakeDataset) -> None:
    root = make_dataset({"none.png": None, "empty.png": "  \r\n", "long.png": ", ".join(["word"] * 60),
                         "latin.png": None})
    (root / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    (root / "lonely.txt").write_text("no image")
    report = check(root)
    assert codes(report, "none.png") == {"missing_caption": "warning"}
    assert codes(report, "empty.png") == {"empty_caption": "warning"}
    assert codes(report, "long.png") == {"long_caption": "warning"}
    assert codes(report, "latin.txt") == {"non_utf8_caption": "warning"}
    assert codes(report, "lonely.txt") == {"orphan_caption": "warning"}


def test_duplicates_and_unsupported(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "x"})
    (root / "copy of a.png").write_bytes((root / "a.png").read_bytes())
    (root / "copy of a.txt").write_text("x")
    (root / "anim.gif").write_bytes(b"GIF89a")
    report = check(root)
    (dup,) = [p for p in report.problems if p.code == "duplicate_image"]
    assert dup.path == str(root / "copy of a.png") and str(root / "a.png") in dup.message
    assert codes(report, "anim.gif") == {"unsupported_format": "warning"}


def test_a_caption_named_after_the_whole_image_name_is_not_called_lonely(make_dataset: MakeDataset) -> None:
    """photo.jpg.txt (as some downloaders name captions) was "without an image: delete the caption file"."""
    root = make_dataset({"photo.jpg": None, "kept.png": "x"})
    (root / "photo.jpg.txt").write_text("a red square", encoding="utf-8")
    (root / "kept.png.txt").write_text("an old caption", encoding="utf-8")  # kept.txt is read: a leftover
    report = check(root)
    (named,) = report.by_path()[str(root / "photo.jpg.txt")]
    assert named.code == "orphan_caption" and named.hint == "rename it to photo.txt"
    assert "photo.jpg trains without it" in named.message
    (leftover,) = report.by_path()[str(root / "kept.png.txt")]
    assert leftover.message == "caption file without an image"


def test_images_named_alike_but_for_the_extension_are_told_they_share_a_caption(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.jpg": "a red square", "b.png": None})
    make_image(root / "a.png", color=(10, 200, 10))
    make_image(root / "B.webp")
    report = check(root)
    assert codes(report, "a.png") == {"shared_caption": "warning"}
    assert "a.jpg" in report.by_path()[str(root / "a.png")][0].message and "(a.txt)" in \
        report.by_path()[str(root / "a.png")][0].message
    assert codes(report, "B.webp") == {"shared_caption": "warning", "missing_caption": "warning"}
    assert "shared_caption" not in codes(report, "a.jpg") and "shared_caption" not in codes(report, "b.png")


def test_empty_and_missing_folders_are_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "kohya" / "3_cat").mkdir(parents=True)
    make_image(tmp_path / "kohya" / "5_dog" / "a.png")
    concepts = [ConceptSection(path="empty"), ConceptSection(path="missing"), ConceptSection(path="kohya")]
    report = check_concepts(concepts, tmp_path, 32)
    found = {(p.code, Path(p.path).name) for p in report.errors}
    assert found == {("no_images", "empty"), ("folder_missing", "missing"), ("no_images", "3_cat")}


def test_cli_json_and_exit_codes(make_dataset: MakeDataset, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_dataset({"a.png": "a caption"})
    assert cli_main(["check-dataset", str(root), "--json", "--resolution", "32"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"images": 1, "errors": 0, "warnings": 0, "problems": []}
    (root / "bad.png").write_bytes(b"")
    assert cli_main(["check-dataset", str(root), "--resolution", "32"]) == 1
    text = capsys.readouterr().out
    assert "bad.png" in text and "1 errors" in text
    assert cli_main(["check-dataset", str(root / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err
    for wrong in ("0", "-512"):  # not the project's resolution, nor every image passing
        assert cli_main(["check-dataset", str(root), "--resolution", wrong]) == 2
        assert f"--resolution {wrong}: give the training resolution in pixels" in capsys.readouterr().err


def test_names_a_windows_code_page_lacks_are_written_not_a_traceback(tmp_path: Path) -> None:
    folder = tmp_path / "Jürgen"
    make_image(folder / "猫.png", size=(64, 64))  # no caption: a problem that names the file
    # Windows writes a command's redirected output (`> report.json`, a pipe) in its code page, cp1252 here.
    env = {**os.environ, "PYTHONIOENCODING": "cp1252", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    command = [sys.executable, "-m", "studio.cli", "check-dataset", str(folder), "--resolution", "64"]
    report = subprocess.run([*command, "--json"], env=env, capture_output=True, timeout=60)  # read as UTF-8 JSON
    assert report.returncode == 0, report.stderr.decode(errors="replace")
    assert [p["path"] for p in json.loads(report.stdout)["problems"]] == [str(folder / "猫.png")]
    text = subprocess.run(command, env=env, capture_output=True, timeout=60)
    assert text.returncode == 0 and b"Traceback" not in text.stderr
    assert "\\u732b.png" in text.stdout.decode("cp1252")  # the name, escaped, where the code page has no letter


def test_cli_reads_project_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studio.core.project.folder import create_project, default_config

    config = default_config("pics")
    project = create_project(tmp_path / "proj", config)
    make_image(project.root / "pics" / "a.png", size=(64, 64))
    assert cli_main(["check-dataset", str(project.root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["images"] == 1
    assert [p["code"] for p in out["problems"]] == ["too_small", "missing_caption"]


# 125 tokens (each digit is one): past CLIP's 75, well within the 512 a Qwen3 text encoder reads.
LONG_CAPTION = ", ".join(f"tag {n}" for n in range(34))


def test_a_caption_is_long_only_past_what_the_familys_text_encoder_reads(make_dataset: MakeDataset) -> None:
    root = make_dataset({"long.png": LONG_CAPTION, "longer.png": LONG_CAPTION * 6})
    sd15 = check_concepts([ConceptSection(path=str(root))], None, 32, family_name="sd15")
    assert codes(sd15, "long.png") == codes(sd15, "longer.png") == {"long_caption": "warning"}
    assert "CLIP reads only the first 75" in next(p.message for p in sd15.problems if Path(p.path).name == "long.png")
    zimage = check_concepts([ConceptSection(path=str(root))], None, 32, family_name="zimage")
    assert codes(zimage, "long.png") == {}
    longer = next(p for p in zimage.problems if Path(p.path).name == "longer.png")
    assert longer.code == "long_caption" and "Qwen3 reads only the first 512" in longer.message
