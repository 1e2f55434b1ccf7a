"""A project moved (another disk, a renamed folder) between Stop and Resume: its run folder's config.toml names
the dataset and the base model where they were, and the resume still ends as the straight run does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from studio.core.config.schema import (
    ConceptSection,
    DatasetSection,
    ModelSection,
    OutputSection,
    TrainingSection,
)
from studio.core.runs.events import Phase, RunFinished, RunStarted, RunWarning, Step
from studio.train.data import cache as cache_module

torch = pytest.importorskip("torch")


def _project(folder: Path, tiny_sd15: Path, demo_data: Path) -> Path:
    shutil.copytree(demo_data, folder / "data" / "shapes")
    shutil.copytree(tiny_sd15, folder / "models" / "tiny-sd15")
    return folder


def test_a_run_resumed_after_its_project_moved_ends_as_the_straight_run(
        make_config, run_training, events_of, stop_after, tiny_sd15: Path, demo_data: Path, tmp_path: Path) -> None:
    config = make_config(
        model=ModelSection(family="sd15", base="models/tiny-sd15"),
        dataset=DatasetSection(concepts=[ConceptSection(path="data/shapes")], resolution=64, buckets=False,
                               flip=True),
        training=TrainingSection(batch_size=2, max_steps=4, learning_rate=2e-3, seed=5, lr_scheduler="cosine"),
        output=OutputSection(dir="runs", formats=["diffusers"]),
    )
    code, straight = run_training(config, _project(tmp_path / "a", tiny_sd15, demo_data))
    assert code == 0
    stop_after(2)
    before = _project(tmp_path / "old disk" / "project", tiny_sd15, demo_data)
    code, run_dir = run_training(config, before)
    assert code == 0 and events_of(run_dir)[-1].status == "stopped"  # type: ignore[attr-defined]
    stop_after(None)
    after = tmp_path / "new disk" / "renamed project"
    after.parent.mkdir()
    shutil.move(before, after)
    run_dir = after / run_dir.relative_to(before)

    code, _ = run_training(None, after, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0, [e for e in events if e.type == "error"]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed" and events[-1].step == 4
    assert [e.resumed_from_step for e in events if isinstance(e, RunStarted)] == [0, 2]
    (warning,) = [e for e in events if isinstance(e, RunWarning) and "moved" in e.message]
    assert warning.message.startswith(f"the run folder moved with its project from {before} to {after}: 2 paths ")
    assert [round(e.loss, 6) for e in events if isinstance(e, Step)] == [
        round(e.loss, 6) for e in events_of(straight) if isinstance(e, Step)]
    got, expected = (load_file(str(run / "output" / "pytorch_lora_weights.safetensors")) for run in (run_dir, straight))
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in expected)


@pytest.mark.parametrize("model", ["in the project", "outside"])
def test_a_moved_project_reuses_its_cached_latents_and_a_changed_image_is_encoded_again(
        model: str, make_config, run_training, events_of, stop_after, tiny_sd15: Path, demo_data: Path,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """training.cache_latents_to_disk keyed each image's latents by its absolute path: after the project moved,
    the resume encoded every image again (and the cache folder doubled) without a word. A copy that does not keep
    the files' times moves it too; an image replaced by another under its old name is never read from the cache.
    The base model moved with the project, or stayed where it was outside it."""
    config = make_config(
        model=ModelSection(family="sd15", base="models/tiny-sd15" if model == "in the project" else str(tiny_sd15)),
        dataset=DatasetSection(concepts=[ConceptSection(path="data/shapes")], resolution=64, buckets=False),
        training=TrainingSection(batch_size=2, max_steps=4, seed=5, cache_latents=True, cache_latents_to_disk=True),
        output=OutputSection(dir="runs", formats=["diffusers"]),
    )
    stop_after(2)
    before = _project(tmp_path / "old disk" / "project", tiny_sd15, demo_data)
    code, run_dir = run_training(config, before)
    assert code == 0 and events_of(run_dir)[-1].status == "stopped"  # type: ignore[attr-defined]
    stop_after(None)
    cache = run_dir / "cache" / "latents"
    first = {path.name: path.read_bytes() for path in cache.glob("*.safetensors")}
    assert len(first) == 8
    after = tmp_path / "new disk" / "projects" / "renamed project"  # one folder deeper than before
    shutil.copytree(before, after, copy_function=shutil.copyfile)  # the files' times are not kept
    shutil.rmtree(before)
    run_dir = after / run_dir.relative_to(before)
    cache = run_dir / "cache" / "latents"
    images = sorted(path for path in (after / "data" / "shapes").iterdir() if path.suffix == ".png")
    images[0].write_bytes(images[1].read_bytes())  # another picture under the first one's name

    # Each picture is read to find its cached file (minutes at 20,000): the caching phase moves while they are.
    monkeypatch.setattr(cache_module, "LOOKUP_PROGRESS_EVERY", 1)
    code, _ = run_training(None, after, resume_dir=run_dir)
    events = events_of(run_dir)
    assert code == 0 and events[-1].status == "completed", [e for e in events if e.type == "error"]  # type: ignore[attr-defined]
    resumed = events[[e.type for e in events].index("run_finished"):]
    looked_up = [(e.done, e.total) for e in resumed if isinstance(e, Phase) and e.name == "caching"]
    # One for each picture looked up (the changed one, first, is not found), then the changed one encoded.
    assert looked_up == [(0, 8), (1, 8), (2, 8), (3, 8), (4, 8), (5, 8), (6, 8), (7, 8), (8, 8)], looked_up
    now = {path.name: path.read_bytes() for path in cache.glob("*.safetensors")}
    assert len(now) == 9  # the eight of the first leg, and the changed image's own
    assert all(now[name] == latents for name, latents in first.items())
