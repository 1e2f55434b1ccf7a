"""A new project made for a folder of images a person already has: found, not moved."""

from __future__ import annotations

import os
from pathlib import Path

from PIL import Image

from studio.core.dataset.scan import scan_dataset
from studio.core.models.known import default_base, known_models
from studio.core.project.folder import PROJECT_FILE, create_project


def _pngs(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32), (200, 40, 40)).save(folder / "shape 0.png")
    for i in range(1, count):
        os.link(folder / "shape 0.png", folder / f"shape {i}.png")


def _tree(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_a_kohya_folder_becomes_one_concept_with_its_repeats(tmp_path: Path) -> None:
    mydata = tmp_path / "mydata"
    _pngs(mydata / "10_shapes", 30)
    before = _tree(mydata)
    project = create_project(mydata)
    config = project.load_config()
    assert [(c.path, c.repeats) for c in config.dataset.concepts] == [("10_shapes", 10)]
    entries = scan_dataset(config.dataset, project.root)
    assert len(entries) == 30 and {e.repeats for e in entries} == {10}
    assert {e.caption for e in entries} == {"shapes"}  # the kohya folder's name
    after = _tree(mydata)
    assert set(after) - set(before) == {PROJECT_FILE, "runs"}  # nothing of the person's moved or rewritten
    assert all(after[name] == stamp for name, stamp in before.items())


def test_a_project_apart_from_its_images_points_at_them_relatively(tmp_path: Path) -> None:
    photos = tmp_path / "Pictures" / "my cat"
    _pngs(photos / "sitting", 2)
    _pngs(photos / "jumping", 3)
    project = create_project(tmp_path / "projects" / "cat lora", images=[photos])
    config = project.load_config()
    assert [c.path for c in config.dataset.concepts] == ["../../Pictures/my cat/jumping",
                                                          "../../Pictures/my cat/sitting"]
    assert len(scan_dataset(config.dataset, project.root)) == 5


def test_a_flat_folder_with_the_project_inside_trains_on_its_images_only(tmp_path: Path) -> None:
    _pngs(tmp_path / "flat", 4)
    project = create_project(tmp_path / "flat")
    config = project.load_config()
    assert [c.path for c in config.dataset.concepts] == ["."]
    run = project.runs_dir / "20250101-000000-run"
    _pngs(run / "samples", 2)
    (run / "events.jsonl").write_text("")
    assert len(scan_dataset(config.dataset, project.root)) == 4


def test_an_empty_folder_gets_an_images_folder_to_fill(tmp_path: Path) -> None:
    project = create_project(tmp_path / "new")
    config = project.load_config()
    assert [c.path for c in config.dataset.concepts] == ["images"]
    assert (project.root / "images").is_dir()
    assert scan_dataset(config.dataset, project.root) == []  # no error: a place to add images


def test_an_existing_project_is_kept(tmp_path: Path) -> None:
    _pngs(tmp_path / "p" / "5_dog", 1)
    project = create_project(tmp_path / "p")
    project.config_path.write_text(project.config_path.read_text() + "# my note\n")
    _pngs(tmp_path / "p" / "7_cat", 1)
    create_project(tmp_path / "p")
    assert project.config_path.read_text().endswith("# my note\n")


def test_a_new_project_starts_from_a_model_that_exists_today() -> None:
    defaults = {m.family: m.id for m in known_models() if m.default}
    assert defaults == {"sd15": "stable-diffusion-v1-5/stable-diffusion-v1-5",
                        "sdxl": "stabilityai/stable-diffusion-xl-base-1.0",
                        "sd3": "stabilityai/stable-diffusion-3-medium-diffusers",
                        "flux2-klein": "black-forest-labs/FLUX.2-klein-base-4B",
                        "zimage": "Tongyi-MAI/Z-Image", "qwen-image": "Qwen/Qwen-Image"}
    assert default_base("sd15") == defaults["sd15"]
