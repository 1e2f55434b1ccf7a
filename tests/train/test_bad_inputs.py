"""Bad inputs end as warning or error events a person can act on, never as a bare traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from studio.core.config.schema import ConceptSection, DatasetSection, ModelSection
from studio.core.runs.events import Error, RunFinished, RunWarning, Step

pytest.importorskip("torch")


def _copy_demo(demo_data: Path, target: Path, count: int = 4) -> Path:
    target.mkdir(parents=True)
    for image in sorted(demo_data.glob("*.png"))[:count]:
        shutil.copy(image, target / image.name)
        shutil.copy(image.with_suffix(".txt"), target / image.with_suffix(".txt").name)
    return target


def _dataset(folder: Path) -> DatasetSection:
    return DatasetSection(concepts=[ConceptSection(path=str(folder))], resolution=64, buckets=False)


def test_corrupt_image_is_skipped_with_a_warning(make_config, run_training, events_of, demo_data, tmp_path) -> None:
    folder = _copy_demo(demo_data, tmp_path / "data")
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really an image")
    (folder / "broken.txt").write_text("a broken picture", encoding="utf-8")
    code, run_dir = run_training(make_config(dataset=_dataset(folder)), tmp_path)
    events = events_of(run_dir)
    assert code == 0
    warnings = [e for e in events if isinstance(e, RunWarning)]
    assert any(w.path and w.path.endswith("broken.png") and "skipped" in w.message for w in warnings)
    assert events[-1].status == "completed"  # type: ignore[attr-defined]


def test_non_utf8_caption_warns_and_trains(make_config, run_training, events_of, demo_data, tmp_path) -> None:
    folder = _copy_demo(demo_data, tmp_path / "data")
    caption = sorted(folder.glob("*.txt"))[0]
    caption.write_bytes("a red circle on a blue background, caf\xe9".encode("cp1252"))
    code, run_dir = run_training(make_config(dataset=_dataset(folder)), tmp_path)
    warnings = [e for e in events_of(run_dir) if isinstance(e, RunWarning)]
    assert code == 0
    assert any(w.path == str(caption) and "not UTF-8" in w.message for w in warnings)


def test_empty_folder_is_a_data_error(make_config, run_training, events_of, tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, run_dir = run_training(make_config(dataset=_dataset(empty)), tmp_path)
    events = events_of(run_dir)
    errors = [e for e in events if isinstance(e, Error)]
    assert code == 1
    assert len(errors) == 1 and errors[0].kind == "data" and str(empty) in errors[0].message
    assert errors[0].hint
    assert isinstance(events[-1], RunFinished) and events[-1].status == "failed"
    assert not any(isinstance(e, Step) for e in events)


def test_missing_model_names_the_path(make_config, run_training, events_of, tmp_path) -> None:
    missing = tmp_path / "models" / "nowhere"
    config = make_config(model=ModelSection(family="sd15", base=str(missing)))
    code, run_dir = run_training(config, tmp_path)
    errors = [e for e in events_of(run_dir) if isinstance(e, Error)]
    assert code == 1
    assert errors[0].kind == "model" and str(missing) in errors[0].message and errors[0].path == str(missing)


def test_model_of_another_family_is_named(make_config, run_training, events_of, tiny_sd15, tmp_path) -> None:
    fake = tmp_path / "xl"
    shutil.copytree(tiny_sd15, fake)
    index = fake / "model_index.json"
    index.write_text(index.read_text().replace("StableDiffusionPipeline", "StableDiffusionXLPipeline"))
    code, run_dir = run_training(make_config(model=ModelSection(family="sd15", base=str(fake))), tmp_path)
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert code == 1 and error.kind == "model" and "sdxl" in error.message and "model.family" in error.hint


def test_out_of_memory_becomes_an_oom_event_with_a_hint(make_config, run_training, events_of, tmp_path,
                                                        monkeypatch) -> None:
    import torch

    from studio.train.families.sd15 import SD15Adapter

    def no_memory(*args: object, **kwargs: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(SD15Adapter, "predict", no_memory)
    code, run_dir = run_training(make_config(), tmp_path)
    events = events_of(run_dir)
    error = next(e for e in events if isinstance(e, Error))
    assert code == 1 and error.kind == "oom"
    assert "batch_size" in error.hint and "gradient_checkpointing" in error.hint
    assert isinstance(events[-1], RunFinished) and events[-1].status == "failed"


def test_nan_loss_stops_the_run_with_a_nan_event(make_config, run_training, events_of, tmp_path,
                                                 monkeypatch) -> None:
    import torch

    from studio.train.families.schemes import DiffusionScheme

    monkeypatch.setattr(DiffusionScheme, "loss", lambda self, p, n, w: (p * torch.tensor(float("nan"))).mean())
    code, run_dir = run_training(make_config(), tmp_path)
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert code == 1 and error.kind == "nan" and "step 1" in error.message and "learning_rate" in error.hint


def test_a_base_that_is_neither_here_nor_on_the_hub_says_both(make_config, run_training, events_of, tmp_path) -> None:
    config = make_config(model=ModelSection(family="sd15", base="tiny/sd15-missing"))
    code, run_dir = run_training(config, tmp_path)
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert code == 1 and error.kind == "model"
    assert '"tiny/sd15-missing": it is no folder or file on this machine, and as a hub model id' in error.message
    assert "relative path starts at the config file's folder" in error.hint


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_a_warning_about_a_file_whose_name_is_not_utf8_reaches_the_gui(make_config, run_training, demo_data,
                                                                     tmp_path) -> None:
    from studio.core.runs.records.run_model import EventTail

    folder = _copy_demo(demo_data, tmp_path / "data")
    odd = Path(os.fsdecode(os.path.join(os.fsencode(folder), b"caf\xe9.png")))
    odd.write_bytes(b"not an image")
    code, run_dir = run_training(make_config(dataset=_dataset(folder)), tmp_path)
    assert code == 0
    # What the Train and Runs pages read (the GUI's tail), not only what the command line reads.
    warnings = [e for e in EventTail(run_dir / "events.jsonl").poll() if isinstance(e, RunWarning)]
    assert any("skipped caf\\xe9.png" in w.message for w in warnings)
