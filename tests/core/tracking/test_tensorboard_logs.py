"""output.log_to = ["tensorboard"] and `studio-train tensorboard`: files TensorBoard's own reader reads back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from studio.core.runs.events import EventWriter, RunFinished, RunStarted, Sample, Step, Validation
from studio.core.tracking.records import EventMirror, open_logger

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _read(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _losses(run_dir: Path, tag: str = "step") -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if r["type"] == tag]


def test_studio_train_tensorboard_writes_an_old_runs_losses(tmp_path: Path) -> None:
    run_dir = tmp_path / "20260101-000000-old"
    run_dir.mkdir()
    writer = EventWriter(run_dir / "events.jsonl")
    writer.write(RunStarted(config={"training": {"seed": 1}}, world_size=1, total_steps=3, devices=["cpu"]))
    for step, loss in ((1, 0.75), (2, 0.5), (3, 0.25)):
        writer.write(Step(step=step, epoch=0, loss=loss, lr=1e-4))
    writer.write(Validation(step=3, loss=0.375, images=2, timesteps=[0.5]))
    (run_dir / "samples").mkdir()
    from PIL import Image

    Image.new("RGB", (16, 8), "red").save(run_dir / "samples" / "step-3-0.png")
    writer.write(Sample(step=3, images=["samples/step-3-0.png"], prompts=["a red square"]))
    writer.write(RunFinished(status="completed", step=3))
    writer.close()
    into = tmp_path / "tb"
    done = subprocess.run([sys.executable, "-m", "studio.cli", "tensorboard", str(run_dir), "--into", str(into)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"tensorboard --logdir {into}" in done.stdout
    scalars = _read(into / run_dir.name)
    assert scalars["train/loss"] == [(1, 0.75), (2, 0.5), (3, 0.25)]
    assert scalars["validation/loss"] == [(3, 0.375)]
    acc = event_accumulator.EventAccumulator(str(into / run_dir.name))
    acc.Reload()
    image = acc.Images("samples/0")[0]
    assert (image.step, image.width, image.height) == (3, 16, 8)


def test_a_cloud_runs_samples_are_exported_from_the_folder_it_was_brought_back_into(tmp_path: Path) -> None:
    from PIL import Image

    from studio.core.tracking.tensorboard import export_run

    run_dir = tmp_path / "20260101-000100-demo"
    there = "/home/sky/sky_workdir/runs/20260101-000500-demo"  # the cluster's folder, named by its own start
    (run_dir / "samples").mkdir(parents=True)
    Image.new("RGB", (16, 8), "red").save(run_dir / "samples" / "step-1-0.png")
    writer = EventWriter(run_dir / "events.jsonl")
    writer.write(RunStarted(config={}, world_size=1, total_steps=1, devices=["cuda:0"], run_dir=there))
    writer.write(Step(step=1, epoch=0, loss=0.5, lr=1e-4))
    writer.write(Sample(step=1, images=[f"{there}/samples/step-1-0.png"], prompts=["a red square"]))
    writer.close()
    logdir, _count = export_run(run_dir)
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    assert [(image.step, image.width) for image in acc.Images("samples/0")] == [(1, 16)]


def test_an_imported_runs_events_never_export_a_picture_of_this_computer(tmp_path: Path) -> None:
    """A run copied from someone else whose sample event names a file of this computer by its absolute path:
    the export finds no such sample in the run, and the person's picture stays out of the logs they share."""
    from PIL import Image

    from studio.core.tracking.tensorboard import export_run

    private = tmp_path / "home" / "Pictures" / "passport.png"
    private.parent.mkdir(parents=True)
    Image.new("RGB", (32, 24), "blue").save(private)
    run_dir = tmp_path / "runs" / "20260101-000100-shared"
    (run_dir / "samples").mkdir(parents=True)
    Image.new("RGB", (16, 8), "red").save(run_dir / "samples" / "step-1-0.png")
    writer = EventWriter(run_dir / "events.jsonl")
    writer.write(RunStarted(config={}, world_size=1, total_steps=1, devices=["cuda:0"], run_dir="/work/runs/x"))
    writer.write(Sample(step=1, images=[str(private), f"/any/{run_dir.name}/../../{private.relative_to('/')}",
                                        "samples/step-1-0.png"], prompts=["a", "b", "c"]))
    writer.close()
    logdir, _count = export_run(run_dir)
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    exported = [(image.width, image.height) for tag in acc.Tags()["images"] for image in acc.Images(tag)]
    assert exported == [(16, 8)]


def test_a_run_folder_without_events_is_named(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "studio.cli", "tensorboard", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "holds no events.jsonl" in done.stderr


def test_the_live_mirror_writes_what_events_jsonl_says(tmp_path: Path) -> None:
    mirror = EventMirror({"tensorboard": open_logger("tensorboard", tmp_path, "run")}, Path, print)
    steps = [Step(step=s, epoch=0, loss=1 / s, lr=1e-3 * s) for s in range(1, 6)]
    for event in steps:
        mirror.write(event)
    mirror.close()
    scalars = _read(tmp_path / "tensorboard")
    assert [(s, round(v, 6)) for s, v in scalars["train/loss"]] == [(e.step, round(e.loss, 6)) for e in steps]
    assert len(scalars["train/lr"]) == 5


def test_exporting_into_the_runs_folder_never_deletes_the_run(tmp_path: Path) -> None:
    """`--into runs` names the run folder itself as the run's TensorBoard folder: refused, the run kept whole
    (its LoRA too); a folder of TensorBoard's files only is still written anew."""
    runs = tmp_path / "runs"
    run_dir = runs / "20260101-000000-kept"
    run_dir.mkdir(parents=True)
    writer = EventWriter(run_dir / "events.jsonl")
    writer.write(RunStarted(config={}, world_size=1, total_steps=1, devices=["cpu"]))
    writer.write(Step(step=1, epoch=0, loss=0.5, lr=1e-4))
    writer.close()
    (run_dir / "output").mkdir()
    (run_dir / "output" / "pytorch_lora_weights.safetensors").write_bytes(b"weights")
    done = subprocess.run([sys.executable, "-m", "studio.cli", "tensorboard", str(run_dir), "--into", str(runs)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "holds more than TensorBoard's files" in done.stderr, done.stderr
    assert (run_dir / "output" / "pytorch_lora_weights.safetensors").read_bytes() == b"weights"
    assert (run_dir / "events.jsonl").is_file()
    from studio.core.tracking.tensorboard import export_run

    first, _count = export_run(run_dir, tmp_path / "tb")
    again, _count = export_run(run_dir, tmp_path / "tb")
    assert first == again and _read(again)["train/loss"] == [(1, 0.5)]


def _leg(run_dir: Path, resumed_from: int, losses: dict[int, float]) -> list[RunStarted | Step]:
    start = RunStarted(config={}, world_size=1, total_steps=6, devices=["cpu"], resumed_from_step=resumed_from)
    return [start, *(Step(step=s, epoch=0, loss=loss, lr=1e-4) for s, loss in losses.items())]


def _served(logdir: Path, tag: str) -> list[tuple[int, float]]:
    """A scalar's points as TensorBoard's server reads them (its reader takes the first start mark of a run
    as its beginning, every later one as a restart)."""
    from tensorboard.backend.event_processing import plugin_event_accumulator
    from tensorboard.util import tensor_util

    acc = plugin_event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    return [(e.step, round(float(tensor_util.make_ndarray(e.tensor_proto)), 6)) for e in acc.Tensors(tag)]


# A run killed at step 5 after its checkpoint at step 3, resumed from it: steps 4 and 5 are trained again.
FIRST_LEG = {1: 0.9, 2: 0.8, 3: 0.7, 4: 0.6, 5: 0.5}
SECOND_LEG = {4: 0.4, 5: 0.3, 6: 0.2}
ONCE_EACH = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.4), (5, 0.3), (6, 0.2)]


@pytest.mark.parametrize("first_leg_marked", [True, False], ids=["marked", "older-files"])
def test_a_resumed_runs_live_curves_show_each_step_once_from_the_leg_that_kept_it(
        tmp_path: Path, first_leg_marked: bool) -> None:
    """Each leg logs into the run's TensorBoard folder: the steps the killed leg made after its checkpoint are
    dropped, so the loss curve never turns back on itself (as the studio's own chart). A first leg logged with
    no start mark (by an earlier studio) is dropped from too."""
    for number, (resumed_from, losses) in enumerate(((0, FIRST_LEG), (3, SECOND_LEG))):
        mirror = EventMirror({"tensorboard": open_logger("tensorboard", tmp_path, "run")}, Path, print)
        events = _leg(tmp_path, resumed_from, losses)
        for event in events if first_leg_marked or number else events[1:]:
            mirror.write(event)
        mirror.close()
        for path in (tmp_path / "tensorboard").glob("events.out.tfevents.[!0]*"):  # the legs in their order
            path.rename(path.with_name(f"events.out.tfevents.000000000{number}.leg"))
    assert _served(tmp_path / "tensorboard", "train/loss") == ONCE_EACH


def test_exporting_a_resumed_run_shows_each_step_once(tmp_path: Path) -> None:
    from studio.core.tracking.tensorboard import export_run

    run_dir = tmp_path / "20260101-000000-resumed"
    run_dir.mkdir()
    writer = EventWriter(run_dir / "events.jsonl")
    for event in [*_leg(run_dir, 0, FIRST_LEG), *_leg(run_dir, 3, SECOND_LEG)]:
        writer.write(event)
    writer.close()
    logdir, _count = export_run(run_dir)
    assert _served(logdir, "train/loss") == ONCE_EACH


def test_exporting_a_run_that_logs_to_tensorboard_while_it_trains_keeps_its_live_file(tmp_path: Path) -> None:
    """The default export folder of a run is the folder its trainer writes live (output.log_to): written anew
    while the run trained, the live file went, and every point after it with it."""
    from studio.core.runs.scheduling.lock import RunLock
    from studio.core.tracking.tensorboard import export_run

    run_dir = tmp_path / "runs" / "20260101-000000-live"
    run_dir.mkdir(parents=True)
    writer = EventWriter(run_dir / "events.jsonl")
    writer.write(RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"]))
    writer.write(Step(step=1, epoch=0, loss=0.5, lr=1e-4))
    writer.close()
    live = run_dir / "tensorboard" / "events.out.tfevents.1.live"
    live.parent.mkdir()
    live.write_bytes(b"the trainer's own")
    lock = RunLock(run_dir).acquire()  # the trainer holds its run folder
    try:
        with pytest.raises(FileExistsError, match=r"is training and writes .* itself: view it there"):
            export_run(run_dir)
        assert live.read_bytes() == b"the trainer's own"
        folder, count = export_run(run_dir, tmp_path / "tb")  # elsewhere: written
        assert folder == tmp_path / "tb" / run_dir.name and count
    finally:
        lock.release()
    assert export_run(run_dir)[0] == run_dir / "tensorboard"  # the run ended: written anew


def test_runs_of_two_projects_are_viewed_from_the_folder_holding_both(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main

    runs = []
    for project in ("cats", "dogs"):
        run_dir = tmp_path / project / "runs" / "20260101-000000-a"
        run_dir.mkdir(parents=True)
        writer = EventWriter(run_dir / "events.jsonl")
        writer.write(RunStarted(config={}, world_size=1, total_steps=1, devices=["cpu"]))
        writer.write(Step(step=1, epoch=0, loss=0.5, lr=1e-4))
        writer.close()
        runs.append(str(run_dir))
    assert main(["tensorboard", *runs]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"view them with: tensorboard --logdir {tmp_path}"
