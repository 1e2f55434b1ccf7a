from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from dataset_files import MakeDataset, make_image

from studio.core.config.schema import ConceptSection
from studio.core.dataset.captions.caption_sources import read_caption_file
from studio.core.dataset.image_headers import image_size
from studio.core.dataset.scan import DatasetError, scan_class_images, scan_concept, scan_concept_report


def test_pairs_sidecars_in_natural_order(make_dataset: MakeDataset) -> None:
    root = make_dataset({"img10.png": "ten", "img2.jpg": "two", "img1.PNG": "one", "no caption.webp": None})
    entries = scan_concept(ConceptSection(path=str(root)))
    assert [e.path.name for e in entries] == ["img1.PNG", "img2.jpg", "img10.png", "no caption.webp"]
    assert [e.caption for e in entries] == ["one", "two", "ten", None]
    assert entries[0].caption_path == root / "img1.txt"
    assert entries[0].caption_source == "txt"
    assert entries[3].caption_source == "none" and entries[3].caption_path is None
    assert all(e.path.is_absolute() and e.repeats == 1 for e in entries)


def test_relative_path_resolves_against_base_dir(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "x"})
    entries = scan_concept(ConceptSection(path="data", repeats=3), base_dir=root.parent)
    assert [e.path for e in entries] == [root / "a.png"]
    assert entries[0].repeats == 3 and entries[0].concept == str(root)


def test_missing_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        scan_concept(ConceptSection(path="nothere"), base_dir=tmp_path)
    message = str(info.value)
    # Where: the folder as the person would look for it, and the config key that names it; what to do.
    assert message.startswith(f"Image folder {tmp_path / 'nothere'} does not exist.")
    assert 'dataset.concepts path "nothere"' in message
    assert "create the folder and add images" in message


def test_hidden_files_and_other_files_skipped(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "x", ".hidden.png": "y", ".cache/b.png": "z"})
    (root / "notes.md").write_text("hi")
    (root / "anim.gif").write_bytes(b"GIF89a")
    report = scan_concept_report(ConceptSection(path=str(root)))
    assert [e.path.name for e in report.entries] == ["a.png"]
    assert report.other_images == [root / "anim.gif"]


def test_a_jpeg_saved_from_a_windows_browser_as_jfif_is_a_training_image(make_dataset: MakeDataset) -> None:
    """Chrome and Edge on Windows save web pictures as .jfif: they were left out of training without a word."""
    from PIL import Image

    root = make_dataset({"a.png": "x"})
    Image.new("RGB", (40, 30), "red").save(root / "saved.jfif", format="JPEG")
    (root / "saved.txt").write_text("a red square", encoding="utf-8")
    entries = scan_concept(ConceptSection(path=str(root)))
    assert [(e.path.name, e.caption) for e in entries] == [("a.png", "x"), ("saved.jfif", "a red square")]
    assert image_size(root / "saved.jfif") == (40, 30)


def test_caption_file_variants(make_dataset: MakeDataset) -> None:
    root = make_dataset({"bom.png": None, "crlf.png": None, "latin.png": None, "cap.png": None})
    (root / "bom.txt").write_bytes(b"\xef\xbb\xbfhello, world\r\n")
    (root / "crlf.txt").write_bytes(b"line one\r\nline two\r\n\r\n")
    (root / "latin.txt").write_bytes("caf\u00e9 cr\u00e8me".encode("cp1252"))
    (root / "cap.caption").write_text("from caption file", encoding="utf-8")
    by_name = {e.path.name: e for e in scan_concept(ConceptSection(path=str(root)))}
    assert by_name["bom.png"].caption == "hello, world" and by_name["bom.png"].caption_utf8
    assert by_name["crlf.png"].caption == "line one\nline two"
    assert by_name["latin.png"].caption == "caf\u00e9 cr\u00e8me" and not by_name["latin.png"].caption_utf8
    assert by_name["cap.png"].caption_source == "caption"
    # Reading never rewrites a file.
    assert (root / "latin.txt").read_bytes() == "caf\u00e9 cr\u00e8me".encode("cp1252")


def test_read_caption_file_utf16(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_bytes(b"\xff\xfe" + "a dog".encode("utf-16-le"))
    assert read_caption_file(path) == ("a dog", False)


def test_txt_wins_over_caption_and_metadata(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "from txt", "b.png": None})
    (root / "a.caption").write_text("from caption")
    (root / "metadata.jsonl").write_text(
        json.dumps({"file_name": "a.png", "text": "meta a"}) + "\n"
        + json.dumps({"file_name": "b.png", "text": "meta b\r\n"}) + "\n"
        + "{broken\n"
    )
    report = scan_concept_report(ConceptSection(path=str(root)))
    a, b = report.entries
    assert (a.caption, a.caption_source) == ("from txt", "txt")
    assert (b.caption, b.caption_source, b.caption_path) == ("meta b", "metadata", root / "metadata.jsonl")
    assert report.metadata_errors[0][1] == 3


def test_explicit_caption_sources(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "from txt"})
    (root / "a.caption").write_text("from caption")
    concept = ConceptSection(path=str(root), caption_source="caption")
    assert scan_concept(concept)[0].caption == "from caption"
    prompt = ConceptSection(path=str(root), caption_source="prompt", instance_prompt="photo of sks dog")
    entry = scan_concept(prompt)[0]
    assert (entry.caption, entry.caption_source, entry.caption_path) == ("photo of sks dog", "prompt", None)


def test_kohya_folders_multiply_repeats_and_name_captions(make_dataset: MakeDataset) -> None:
    root = make_dataset({"10_sks_dog/a.png": None, "10_sks_dog/b.png": "own caption", "2_style/deep/c.png": None})
    (root / "5_empty").mkdir()
    report = scan_concept_report(ConceptSection(path=str(root), repeats=2))
    by_name = {e.path.name: e for e in report.entries}
    assert by_name["a.png"].repeats == 20
    assert (by_name["a.png"].caption, by_name["a.png"].caption_source) == ("sks dog", "folder")
    assert by_name["b.png"].caption == "own caption"
    assert by_name["c.png"].repeats == 4 and by_name["c.png"].caption == "style"
    assert report.empty_folders == [root / "5_empty"]


def test_instance_prompt_is_the_last_fallback(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": None, "b.png": "own"})
    entries = scan_concept(ConceptSection(path=str(root), instance_prompt="sks"))
    assert [(e.caption, e.caption_source) for e in entries] == [("sks", "prompt"), ("own", "txt")]


def test_orphan_captions(make_dataset: MakeDataset) -> None:
    root = make_dataset({"a.png": "x"})
    (root / "gone.txt").write_text("left behind")
    assert scan_concept_report(ConceptSection(path=str(root))).orphan_captions == [root / "gone.txt"]


@pytest.mark.skipif(os.name == "nt", reason="symlinks need privileges on Windows")
def test_symlink_loops_are_entered_once(make_dataset: MakeDataset) -> None:
    root = make_dataset({"sub/a.png": "x"})
    (root / "sub" / "loop").symlink_to(root, target_is_directory=True)
    entries = scan_concept(ConceptSection(path=str(root)))
    assert [e.path.name for e in entries] == ["a.png"]


def test_non_ascii_names(make_dataset: MakeDataset) -> None:
    root = make_dataset({"ünïcode dir/çà va 猫.png": "猫, cat"})
    (entry,) = scan_concept(ConceptSection(path=str(root)))
    assert entry.caption == "猫, cat"


def test_image_size_reads_header_and_exif_rotation(tmp_path: Path) -> None:
    from PIL import Image

    plain = make_image(tmp_path / "p.png", size=(30, 10))
    assert image_size(plain) == (30, 10)
    rotated = tmp_path / "r.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (30, 10)).save(rotated, exif=exif)
    assert image_size(rotated) == (10, 30)
    broken = tmp_path / "b.png"
    broken.write_bytes(b"")
    assert image_size(broken) is None


def test_class_images(make_dataset: MakeDataset) -> None:
    root = make_dataset({"inst/a.png": None, "cls/x.png": None, "cls/y.png": None})
    concept = ConceptSection(path=str(root / "inst"), class_path=str(root / "cls"), class_prompt="a dog")
    entries = scan_class_images(concept)
    assert [(e.path.name, e.caption, e.is_class) for e in entries] == [("x.png", "a dog", True), ("y.png", "a dog", True)]
