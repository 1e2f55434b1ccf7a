"""The Runs table's rows come from the run folders."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from studio.core.runs.events import RunStarted
from studio.core.runs.folders import REMOTE_FILE
from studio.core.runs.records.history import delete_run, delete_runs, import_run, list_runs, summarize_run
from studio.core.runs.scheduling.lock import write_process_file
from tests.core.runs.conftest import step_event, write_events


def never_alive(_: Path) -> bool:
    return False


def test_summary_of_a_finished_run(finished_run: Path) -> None:
    s = summarize_run(finished_run, never_alive)
    assert (s.name, s.family, s.method, s.preset) == ("20240102-030405-cat", "sdxl", "lora", "sdxl-lora-12gb")
    assert (s.status, s.steps, s.total_steps) == ("completed", 3, 3)
    assert s.final_loss == pytest.approx(1 / 3)
    assert s.duration_s == pytest.approx(10.0)
    assert s.outputs == [str(finished_run / "output" / "pytorch_lora_weights.safetensors")]
    assert not s.remote and not s.resumable


def test_events_without_finish_and_no_process_is_interrupted(tmp_path: Path) -> None:
    run = tmp_path / "20240101-000000-dog"
    write_events(run / "events.jsonl", [step_event(1), step_event(2)])
    s = summarize_run(run, never_alive)
    assert s.status == "interrupted" and s.resumable and s.steps == 2
    assert summarize_run(run, lambda _: True).status == "running"


def test_process_file_of_a_dead_process_means_interrupted(tmp_path: Path) -> None:
    import subprocess
    import sys

    run = tmp_path / "20240101-000000-dog"
    write_events(run / "events.jsonl", [step_event(1)])
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    write_process_file(run, proc.pid)
    proc.wait()
    assert summarize_run(run).status == "interrupted"


def test_list_runs_newest_first_and_reads_config_when_no_events(tmp_path: Path, finished_run: Path) -> None:
    runs = finished_run.parent
    fresh = runs / "20250101-000000-new"
    fresh.mkdir()
    (fresh / "config.toml").write_text('[model]\nfamily = "sd3"\n[method]\nkind = "dreambooth"\n')
    rows = list_runs(runs, never_alive)
    assert [r.name for r in rows] == ["20250101-000000-new", "20240102-030405-cat"]
    assert (rows[0].family, rows[0].method, rows[0].status) == ("sd3", "dreambooth", "not started")


def test_delete_run_removes_the_folder(finished_run: Path) -> None:
    how = delete_run(finished_run)
    assert how in ("trash", "deleted")
    assert not finished_run.exists()


def test_delete_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "photos").mkdir()
    with pytest.raises(ValueError, match="not a run folder"):
        delete_run(tmp_path / "photos")
    assert (tmp_path / "photos").exists()


def test_deleting_several_runs_names_each_and_stops_at_one_it_cannot_delete(finished_run: Path, tmp_path: Path) -> None:
    """Runs chosen together: one deleted outside the studio since the list was read counts as gone, and the one that
    cannot be deleted stops the rest, the message naming those deleted before it."""
    gone = summarize_run(finished_run, never_alive)
    copy = tmp_path / "20240103-000000-copy"
    import shutil

    shutil.copytree(finished_run, copy)
    shutil.rmtree(finished_run)  # deleted in the file manager
    photos = tmp_path / "20240104-000000-photos"
    photos.mkdir()
    after = tmp_path / "20240105-000000-after"
    shutil.copytree(copy, after)
    runs = [gone, summarize_run(copy, never_alive), summarize_run(photos, never_alive), summarize_run(after, never_alive)]
    done, stopped = delete_runs(runs)
    assert done[0] == f"{gone.name} (no longer existed)" and done[1].startswith("20240103-000000-copy (")
    assert len(done) == 2 and not copy.exists()
    assert stopped is not None and stopped.startswith("Could not delete 20240104-000000-photos: ")
    assert "not a run folder" in stopped and photos.exists() and after.exists()  # the rest are left


def test_delete_falls_back_without_send2trash(finished_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_send2trash(name: str, *args: object, **kwargs: object) -> object:
        if name == "send2trash":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_send2trash)
    assert delete_run(finished_run) == "deleted"
    assert not finished_run.exists()


def test_on_windows_a_run_the_recycle_bin_refuses_is_left_whole(finished_run: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows refuses to recycle a folder with a file open in another program; deleting it for good instead
    removed everything else of the run and left the open file."""
    import sys
    import types

    from studio.core.runs.records import history

    class Windows:
        platform = "win32"

        def __getattr__(self, attribute: str) -> object:
            return getattr(sys, attribute)

    def refuse(path: str) -> None:
        raise OSError(None, "The process cannot access the file because it is being used by another process",
                      path, 32)

    monkeypatch.setitem(sys.modules, "send2trash", types.SimpleNamespace(send2trash=refuse))
    monkeypatch.setattr(history, "sys", Windows())
    before = sorted(p.relative_to(finished_run) for p in finished_run.rglob("*"))
    with pytest.raises(OSError, match=r"could not be moved to the Recycle Bin \(The process cannot access the "
                                      r"file.*\); a file in it may be open in another program"):
        delete_run(finished_run)
    assert sorted(p.relative_to(finished_run) for p in finished_run.rglob("*")) == before


def test_import_zip_from_remote_machine(tmp_path: Path, finished_run: Path) -> None:
    archive = tmp_path / "copied.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in finished_run.rglob("*"):
            z.write(f, "pod-run/" + f.relative_to(finished_run).as_posix())
    dest = import_run(archive, tmp_path / "project" / "runs")
    assert dest.name == "pod-run" and (dest / REMOTE_FILE).exists()
    s = summarize_run(dest, never_alive)
    assert s.remote and s.status == "completed" and not s.resumable


def test_import_rejects_a_zip_without_events(tmp_path: Path) -> None:
    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("readme.txt", "hi")
    with pytest.raises(ValueError, match=r"holds no events\.jsonl"):
        import_run(archive, tmp_path / "runs")


def test_import_folder_copies_and_marks_remote(tmp_path: Path, finished_run: Path) -> None:
    dest = import_run(finished_run, tmp_path / "other" / "runs")
    assert (dest / "events.jsonl").exists() and (dest / REMOTE_FILE).exists()
    assert not (finished_run / REMOTE_FILE).exists()


def test_a_run_shows_its_default_method_and_the_preset_its_settings_match(tmp_path: Path) -> None:
    from studio.core.config.files.presets import apply_preset, get_preset, list_presets
    from studio.core.config.files.toml_file import config_to_data
    from studio.core.project.folder import default_config

    runs = tmp_path / "runs"
    settings = {
        "20240101-000000-plain": config_to_data(default_config()),  # sparse: no method.kind written
        "20240102-000000-preset": config_to_data(apply_preset(default_config(), get_preset("sd15-lora-6gb"))),
    }
    tuned = apply_preset(default_config(), get_preset("sd15-lora-6gb"))
    tuned.training.learning_rate = 3e-4
    settings["20240103-000000-tuned"] = config_to_data(tuned)
    for name, config in settings.items():
        write_events(runs / name / "events.jsonl", [
            RunStarted(config=config, world_size=1, total_steps=1, devices=["cpu"], time=1000.0), step_event(1)])
    rows = {s.name: s for s in list_runs(runs, never_alive)}
    assert "kind" not in settings["20240101-000000-plain"].get("method", {})
    assert rows["20240101-000000-plain"].method == "lora"
    assert rows["20240102-000000-preset"].preset == "SD1.5 LoRA (6 GB)"
    assert rows["20240103-000000-tuned"].preset == "SD1.5 LoRA (6 GB) (changed)"
    assert rows["20240101-000000-plain"].preset == "custom"
    assert {s.title for s in list_presets()} >= {"SD1.5 LoRA (6 GB)"}


def test_a_refused_zip_leaves_no_run_behind(tmp_path: Path, finished_run: Path) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted(finished_run.rglob("*")):
            z.write(f, "pod-run/" + f.relative_to(finished_run).as_posix())
        z.writestr("pod-run/../../escaped.txt", "outside the runs folder")
    runs = tmp_path / "project" / "runs"
    with pytest.raises(ValueError, match="climbs out with"):
        import_run(archive, runs)
    assert list_runs(runs, never_alive) == []
    assert list(runs.iterdir()) == [] and not (tmp_path / "escaped.txt").exists()


def test_the_summary_says_the_run_s_speed_and_where_its_time_went(tmp_path: Path) -> None:
    from studio.core.runs.events import PhaseTime, RunFinished

    run = tmp_path / "20240101-000000-dog"
    write_events(run / "events.jsonl", [step_event(1), RunFinished(
        status="completed", step=1, images_per_s=9.54,
        phases=[PhaseTime("loading", 12.3), PhaseTime("text encoding (CPU)", 4.1), PhaseTime("steps", 30.0)])])
    s = summarize_run(run, never_alive)
    assert s.images_per_s == 9.54
    assert s.phases == "loading 12.3 s, text encoding (CPU) 4.1 s, steps 30.0 s"


def test_a_run_finished_by_an_older_trainer_has_no_speed_to_show(finished_run: Path) -> None:
    s = summarize_run(finished_run, never_alive)
    assert s.images_per_s is None and s.phases == ""


def test_the_runs_table_filled_again_reads_only_the_runs_that_changed(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # 30 finished runs and one that goes on: filling the table again (at each run's start) reads the one
    # whose events grew, not all 31 again.
    from studio.core.runs.event_reading import glance

    runs = tmp_path / "runs"
    for index in range(31):
        write_events(runs / f"20240101-0000{index:02d}-r" / "events.jsonl",
                     [RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"]), step_event(1)])
    read: list[Path] = []
    real_replay = glance.replay_run
    monkeypatch.setattr(glance, "replay_run", lambda folder: read.append(Path(folder)) or real_replay(folder))
    assert len(list_runs(runs, never_alive)) == 31 and len(read) == 31
    growing = runs / "20240101-000030-r"
    write_events(growing / "events.jsonl", [step_event(2)])
    rows = {row.name: row for row in list_runs(runs, never_alive)}
    assert read[31:] == [growing]
    assert rows[growing.name].steps == 2 and rows["20240101-000000-r"].steps == 1


def test_a_run_training_on_a_cloud_cluster_is_running_until_it_is_brought_back(tmp_path: Path) -> None:
    """Its events here are a mirror of the cluster's: no trainer here, no run_finished yet. Not "interrupted"
    (which offered Delete and Resume for a run that goes on, paid by the hour)."""
    import json

    from studio.core.runs.records.history import replay_to_show

    run = tmp_path / "20240102-030405-cloudy"
    write_events(run / "events.jsonl", [step_event(1), step_event(2)])
    (run / "cloud.json").write_text(json.dumps({"cluster": "studio-abc", "job": 1, "bundle": "b", "launched": 1.0,
                                                "state": "running"}), encoding="utf-8")
    summary = summarize_run(run, alive=lambda _p: False)
    assert summary.status == "running" and not summary.resumable
    assert "studio-abc" in summary.message and "cloud pull studio-abc" in summary.message
    assert not replay_to_show(run, alive=lambda _p: False).model.ended
    (run / "cloud.json").write_text(json.dumps({"cluster": "studio-abc", "state": "down"}), encoding="utf-8")
    assert summarize_run(run, alive=lambda _p: False).status == "interrupted"  # brought back, yet no end said


def test_an_epochs_lora_saved_again_by_a_resumed_leg_is_listed_once(tmp_path: Path) -> None:
    """Killed after epoch 1's LoRA (step 600), resumed from the checkpoint of step 500: epoch 1 ends again and
    writes the same file. The Output column names it once."""
    from studio.core.runs.events import EpochSaved, RunFinished

    run = tmp_path / "20240102-030405-epochs"
    epoch_1 = str(run / "output" / "epoch-0001" / "cat-e0001.safetensors")
    write_events(run / "events.jsonl", [
        RunStarted(config={}, world_size=1, total_steps=1000, devices=["cpu"], time=1000.0),
        step_event(600), EpochSaved(step=600, epoch=1, outputs=[epoch_1], time=1700.0), step_event(700),
        RunStarted(config={}, world_size=1, total_steps=1000, devices=["cpu"], resumed_from_step=500, time=9000.0),
        step_event(600, t=9000.0), EpochSaved(step=600, epoch=1, outputs=[epoch_1], time=9700.0),
        RunFinished(status="completed", step=1000, outputs=[str(run / "output" / "cat.safetensors")], time=9900.0),
    ])
    assert [Path(o).name for o in summarize_run(run).outputs] == ["cat.safetensors", "cat-e0001.safetensors"]


def test_a_cloud_runs_outputs_are_found_in_the_folder_it_was_brought_back_into(tmp_path: Path) -> None:
    from studio.core.runs.events import RunFinished

    run = tmp_path / "20240101-000100-demo"
    there = "/home/sky/sky_workdir/runs/20240101-000500-demo"
    write_events(run / "events.jsonl", [
        RunStarted(config={}, world_size=1, total_steps=2, devices=["cuda:0"], run_dir=there, time=1000.0),
        step_event(1), step_event(2),
        RunFinished(status="completed", step=2, outputs=[f"{there}/output/demo.safetensors"], time=1003.0)])
    assert summarize_run(run).outputs == [str(run / "output" / "demo.safetensors")]
