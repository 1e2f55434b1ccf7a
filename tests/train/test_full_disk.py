"""A disk with no byte left: the run's end is always recorded, nothing half written stays, resume continues."""

from __future__ import annotations

import errno
import math
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import pytest

from studio.core.config.schema import OutputSection, TrainingSection
from studio.core.runs.event_writer import RESERVE_BYTES, EventWriter
from studio.core.runs.events import Checkpoint, Error, RunFinished, Step

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")


class FullDisk:
    """events.jsonl's disk fills up once the checkpoint of step `at` is being recorded: that line
    is cut after a few bytes; deleting the reserve file frees its room again, as on a real disk."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: int) -> None:
        self.room: int | None = None  # None: not full yet
        self.at = at
        real_write, real_release = os.write, EventWriter.release_reserve

        def write(fd: int, data: bytes) -> int:
            try:
                name = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                name = ""
            if not name.endswith("events.jsonl"):
                return real_write(fd, data)
            if self.room is None and b'"type":"checkpoint"' in bytes(data) and f'"step":{self.at},'.encode() in bytes(data):
                self.room = 12
            if self.room is None:
                return real_write(fd, data)
            if self.room <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            written = real_write(fd, bytes(data)[: self.room])
            self.room -= written
            return written

        def release(writer: EventWriter) -> bool:
            freed = real_release(writer)
            if freed and self.room is not None:
                self.room += RESERVE_BYTES
            return freed

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(EventWriter, "release_reserve", release)


def test_a_disk_full_after_a_checkpoint_stops_the_run_and_records_its_end(
        make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    FullDisk(monkeypatch, at=2)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=8, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), save_every_n_steps=2))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)  # every line parses: the cut line was completed from the reserve
    assert code == 1
    assert [e.step for e in events if isinstance(e, Checkpoint)] == [2]
    assert max(e.step for e in events if isinstance(e, Step)) == 2  # no training past the failed write
    error, finished = events[-2:]
    assert isinstance(error, Error) and error.kind == "disk_full"
    assert f"the disk holding {run_dir} is full while writing events.jsonl" in error.message
    assert isinstance(finished, RunFinished) and finished.status == "failed" and finished.step == 2
    assert not (run_dir / "events.jsonl.reserve").exists()
    out = capsys.readouterr()
    assert (out.out + out.err).count("is full while writing") == 1


def test_a_safetensors_error_while_checkpointing_leaves_no_checkpoint_folder(
        make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import safetensors.torch
    from safetensors import SafetensorError

    real_save = safetensors.torch.save_file
    calls: list[str] = []

    def save_file(tensors: dict[str, torch.Tensor], filename: str, *args: object, **kwargs: object) -> None:
        calls.append(filename)
        if "step-2" not in filename:
            return real_save(tensors, filename, *args, **kwargs)
        Path(filename).write_bytes(b"\0" * 100)
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                              'message: "No space left on device" })')

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    config = make_config(training=TrainingSection(batch_size=2, max_steps=4, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), save_every_n_steps=1))
    code, run_dir = run_training(config, tmp_path)
    events = events_of(run_dir)
    assert code == 1
    (error,) = [e for e in events if isinstance(e, Error)]
    assert error.kind == "disk_full" and "the checkpoint of step 2" in error.message
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-1"]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "failed"


def _disk_fills(folder: Path, name: str) -> NoReturn:
    """A kohya file begun when the disk filled up."""
    from safetensors import SafetensorError

    (folder / f"{name}.safetensors").write_bytes(b"\0" * 1000)
    raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                          'message: "No space left on device" })')


def _disk_full_error(code: int, events: list[Any], output: Path) -> Error:
    assert code == 1
    (error,) = [e for e in events if isinstance(e, Error)]
    assert error.kind == "disk_full" and error.path == str(output)
    return error


def test_a_full_disk_while_writing_the_outputs_names_the_file_and_leaves_no_half_output(
        make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.train.families import kohya

    # The diffusers file is written, then the disk is full.
    monkeypatch.setattr(kohya, "save_kohya_file", lambda folder, name, *args, **kwargs: _disk_fills(folder, name))
    config = make_config(training=TrainingSection(batch_size=2, max_steps=2, seed=1))
    code, run_dir = run_training(config, tmp_path)
    output = run_dir / "output"
    error = _disk_full_error(code, events_of(run_dir), output)
    assert f"while writing the outputs ({output / config.output.name}.safetensors)" in error.message
    assert error.needed_bytes and error.needed_bytes > 2**20 and "needed" in error.message
    assert list(output.iterdir()) == []  # nothing half written


def test_a_full_disk_while_writing_an_epochs_lora_names_it_and_leaves_no_half_file(
        make_config, run_training, events_of, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from studio.train.families import kohya

    real = kohya.save_kohya_file

    def full_at_the_first_epoch(folder: Path, name: str, *args: object, **kwargs: object) -> Path:
        if not name.endswith("-e0001"):
            return real(folder, name, *args, **kwargs)  # type: ignore[arg-type]
        _disk_fills(folder, name)

    monkeypatch.setattr(kohya, "save_kohya_file", full_at_the_first_epoch)
    # 8 demo images, batch 2: epoch 1 ends at step 4, with its diffusers file written before the kohya one.
    config = make_config(training=TrainingSection(batch_size=2, max_steps=8, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs"), name="shapes", save_every_n_epochs=1,
                                              formats=["diffusers", "kohya"]))
    code, run_dir = run_training(config, tmp_path)
    output = run_dir / "output"
    error = _disk_full_error(code, events_of(run_dir), output)
    assert f"while writing the LoRA of epoch 1 ({output / 'epoch-0001' / 'shapes-e0001.safetensors'})" in error.message
    assert list(output.iterdir()) == []  # no epoch folder with a file no UI can load


@pytest.mark.parametrize("ema", [False, True])
def test_the_pre_flight_disk_figure_matches_what_a_run_writes(
        make_config, run_training, tmp_path: Path, ema: bool) -> None:
    from safetensors import safe_open

    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.schema import SamplingSection
    from studio.core.project.disk_estimate import MB, estimate_disk_bytes

    config = make_config(training=TrainingSection(batch_size=2, max_steps=6, seed=1, ema=ema),
                         sampling=SamplingSection(every_n_steps=3, prompts=["a red circle"], steps=2),
                         output=OutputSection(dir=str(tmp_path / "runs"), save_every_n_steps=2, keep_last=1))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    (trained,) = (run_dir / "checkpoints").glob("step-*/trainable_0.safetensors")
    with safe_open(str(trained), "pt") as handle:
        params = sum(math.prod(handle.get_slice(key).get_shape()) for key in handle.keys())  # noqa: SIM118 - not a dict
    written = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
    checkpoint = sum(p.stat().st_size for p in (run_dir / "checkpoints").rglob("*") if p.is_file())
    peak = written + checkpoint  # the newest checkpoint is written before the oldest goes
    estimate = estimate_disk_bytes(resolve_paths(config, tmp_path), params)
    print(f"{params} weights trained: estimate {estimate / MB:.2f} MB, written at the peak {peak / MB:.2f} MB")
    assert peak <= estimate <= peak * 1.25 + MB


def test_the_pre_flight_disk_figure_counts_a_full_fine_tunes_average_as_a_second_set_of_outputs(
        make_config, tmp_path: Path) -> None:
    # A DreamBooth with EMA writes the average as a pipeline folder and, with "single_file", as a second
    # checkpoint file: the figure counted the folder only, a whole checkpoint short.
    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.schema import MethodSection
    from studio.core.project.disk_estimate import estimate_disk_bytes, pipeline_params

    params = 10**8

    def config(ema: bool) -> Any:
        return resolve_paths(make_config(
            method=MethodSection(kind="dreambooth"), training=TrainingSection(batch_size=2, max_steps=10, ema=ema),
            output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers", "single_file"],
                                 save_precision="fp16")), tmp_path)

    in_checkpoint, outputs = params * 4, 2 * pipeline_params(config(True)) * 2  # the fp32 average; folder, file
    assert estimate_disk_bytes(config(True), params) - estimate_disk_bytes(config(False), params) == pytest.approx(
        1.1 * (in_checkpoint + outputs), rel=1e-6)


def test_the_pre_flight_disk_figure_counts_each_sample_at_its_prompts_own_size(make_config, tmp_path: Path) -> None:
    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.schema import SamplingSection
    from studio.core.project.disk_estimate import estimate_disk_bytes

    def figure(prompt: str) -> int:
        sampling = SamplingSection(every_n_steps=5, prompts=["a red circle", prompt])
        config = make_config(training=TrainingSection(batch_size=2, max_steps=10), sampling=sampling)
        return estimate_disk_bytes(resolve_paths(config, tmp_path), trainable_params=1000)

    rounds = 10 // 5 + 1
    grown = figure("a red circle --w 2048 --h 1024") - figure("a red circle")
    assert grown == pytest.approx(1.1 * rounds * (2048 * 1024 - 64 * 64) * 3 / 2, abs=2)


def test_the_pre_flight_disk_figure_counts_the_samples_before_the_first_step(make_config, tmp_path: Path) -> None:
    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.schema import SamplingSection
    from studio.core.project.disk_estimate import estimate_disk_bytes

    def figure(at_start: bool) -> int:
        sampling = SamplingSection(every_n_steps=5, at_start=at_start, prompts=["a red circle --w 2048 --h 1024"])
        config = make_config(training=TrainingSection(batch_size=2, max_steps=10), sampling=sampling)
        return estimate_disk_bytes(resolve_paths(config, tmp_path), trainable_params=1000)

    assert figure(True) - figure(False) == pytest.approx(1.1 * 2048 * 1024 * 3 / 2, abs=2)  # one more round


def test_the_pre_flight_disk_figure_of_a_full_fine_tune_counts_the_whole_pipeline(
        make_config, run_training, tmp_path: Path) -> None:
    # A DreamBooth writes the VAE and the text encoders beside the trained weights: the figure counted the
    # trained weights alone (SD3: a quarter of its output), and a run it let start failed writing its outputs.
    from studio.core.config.files.paths import resolve_paths
    from studio.core.config.schema import MethodSection
    from studio.core.project.disk_estimate import MB, estimate_disk_bytes

    config = make_config(method=MethodSection(kind="dreambooth"), training=TrainingSection(batch_size=2, max_steps=2),
                         output=OutputSection(dir=str(tmp_path / "runs"), formats=["diffusers", "single_file"]))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    outputs = sum(p.stat().st_size for p in (run_dir / "output").rglob("*.safetensors"))
    # With no trained weights counted, the figure is the outputs' (and a megabyte of logs and margin).
    estimate = estimate_disk_bytes(resolve_paths(config, tmp_path), trainable_params=0)
    assert outputs <= estimate <= outputs * 1.25 + MB
