"""`studio-train` meets mistakes a person can fix with one line that says what, where and what to do,
an exit code (2 for input to fix, 1 for a refusal) and no traceback; nothing is started or half-written."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from studio.cli import main as cli_main
from studio.core.runs.events import RunFinished, RunStarted
from tests.core.runs.conftest import write_events

CONFIG = """\
schema_version = 1
[model]
family = "sd15"
base = "org/model"
[[dataset.concepts]]
path = "data"
[output]
dir = "{out}"
name = "{name}"
{launch}
"""


def _config(folder: Path, out: str = "runs", name: str = "demo", launch: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "studio.toml"
    path.write_text(CONFIG.format(out=out, name=name, launch=launch), encoding="utf-8")
    return path


def test_a_run_name_too_long_for_a_folder_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path, name="n" * 300)
    for command in ("validate", "run"):
        assert cli_main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert "output.name" in err and "100" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_a_project_folder_whose_name_is_not_utf8_is_a_config_error(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    folder = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9")))
    path = _config(folder)
    for command in ("validate", "command", "run"):
        assert cli_main([command, str(path)]) == 2, command
        err = capsys.readouterr().err
        assert "dataset.concepts[0].path" in err and "not valid UTF-8" in err and "caf\\xe9" in err, command
    assert not (folder / "runs").exists()


def test_a_missing_training_python_is_named_before_anything_starts(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "venv" / "bin" / "python"
    path = _config(tmp_path, launch=f'[launch]\npython = "{missing}"')
    assert cli_main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f'launch.python = "{missing}" cannot be started (no such file)' in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(os.name != "posix", reason="a venv's python is a link on POSIX")
def test_a_training_python_beside_the_config_is_found_from_any_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "project" / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)  # as a venv's python is
    path = _config(tmp_path / "project", launch='[launch]\npython = "venv/bin/python"')
    monkeypatch.chdir(tmp_path)  # `studio-train run project/studio.toml` from the folder above
    assert cli_main(["command", str(path)]) == 0
    command = capsys.readouterr().out.splitlines()[-1]
    assert command.startswith(f"{venv / 'python'} -m studio.train.launcher ")  # the venv's, its link kept


def test_an_output_folder_that_cannot_be_written_says_where_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "disk").write_text("a file where a folder should be", encoding="utf-8")
    path = _config(tmp_path, out="disk/runs")
    # The preflight finds it before anything starts: a config to fix (exit 2), not a failed run.
    assert cli_main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"Output folder {tmp_path / 'disk' / 'runs'} is inside a file" in err
    assert "output.dir" in err and "Traceback" not in err


def test_command_prepare_says_why_the_run_folder_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "disk").write_text("a file where a folder should be", encoding="utf-8")
    path = _config(tmp_path, out="disk/runs")
    assert cli_main(["command", str(path), "--prepare"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write the run folder under") and "output.dir" in err
    assert "Traceback" not in err


def test_command_refuses_no_processes_as_run_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path)
    assert cli_main(["command", str(path), "--prepare", "--processes", "0"]) == 2
    assert "--processes must be at least 1, not 0" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # no run folder prepared for a count it would not have used


def test_fewer_processes_than_machines_is_refused_as_the_config_would_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two machines in the config, --processes 1 given: launch.num_processes = 1 in the file is refused.
    path = _config(tmp_path, launch="[launch]\nnum_machines = 2\nnum_processes = 2")
    for command in (["run", str(path)], ["command", str(path), "--prepare"]):
        assert cli_main([*command, "--processes", "1"]) == 2, command
        err = capsys.readouterr().err
        assert "--processes 1 must be at least launch.num_machines (2)" in err and "Traceback" not in err, command
    assert cli_main(["command", str(path), "--processes", "2000"]) == 2
    assert "--processes must be at most 1024, not 2000" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "20240101-000000-demo"
    run.mkdir(parents=True)
    (run / "config.toml").write_text(CONFIG.format(out=tmp_path / "runs", name="demo", launch=""), encoding="utf-8")
    (run / "accelerate.yaml").write_text("distributed_type: 'NO'\n", encoding="utf-8")
    write_events(run / "events.jsonl", [RunStarted(config={}, world_size=1, total_steps=9, devices=["cpu"]),
                                        RunFinished(status="stopped", step=3)])
    return run


def test_resume_refuses_a_run_imported_from_another_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run_folder(tmp_path)
    (run / "remote.json").write_text('{"source": "pod.zip"}', encoding="utf-8")
    before = (run / "events.jsonl").read_bytes()
    assert cli_main(["resume", str(run)]) == 1
    err = capsys.readouterr().err
    assert "imported from another machine" in err and "remote.json" in err
    assert (run / "events.jsonl").read_bytes() == before and not (run / "console.log").exists()


def test_a_run_brought_back_from_a_cloud_is_not_offered_for_resume_here(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # A cloud run stopped with a checkpoint came back with the cluster's paths in its config; the Runs page and
    # `studio-train resume` offered to resume it on this computer, which then looked for /home/.../sky_workdir/.
    from studio.core.cloud.run import new_record, write_cloud_record
    from studio.core.runs.records.history import summarize_run

    run = _run_folder(tmp_path)
    record = new_record("studio-demo", 1, tmp_path / "bundle")
    record.state = "down"
    write_cloud_record(run, record)
    row = summarize_run(run, lambda _: False)
    assert (row.status, row.remote, row.resumable) == ("stopped", True, False)
    before = (run / "events.jsonl").read_bytes()
    assert cli_main(["resume", str(run)]) == 1
    err = capsys.readouterr().err
    assert "trained on a cloud cluster" in err and "cloud.json" in err
    assert (run / "events.jsonl").read_bytes() == before and not (run / "console.log").exists()


def test_resume_refuses_a_disk_without_room_for_what_the_run_still_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    run = _run_folder(tmp_path)
    before = (run / "events.jsonl").read_bytes()
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(2**40, 2**40, 3 * 2**20))  # type: ignore[attr-defined]
    assert cli_main(["resume", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: Not enough free disk to resume {run.name}: it still writes about ")
    assert "MB (checkpoints and outputs), 3 MB free" in err and "Traceback" not in err
    assert (run / "events.jsonl").read_bytes() == before and not (run / "console.log").exists()


def test_resume_refuses_a_run_another_trainer_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from studio.core.runs.scheduling.lock import RunLock

    run = _run_folder(tmp_path)
    with RunLock(run):
        assert cli_main(["resume", str(run)]) == 1
    err = capsys.readouterr().err
    assert f"is being trained by process {os.getpid()}" in err
    assert not (run / "console.log").exists()


def test_a_held_out_share_that_leaves_nothing_to_train_on_is_refused_by_validate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    from studio.core.config.files.paths import load_resolved
    from studio.core.project.preflight import check_dataset

    (tmp_path / "data").mkdir()
    for i in range(24):
        Image.new("RGB", (8, 8)).save(tmp_path / "data" / f"{i:02}.png")
    path = _config(tmp_path)
    text = path.read_text(encoding="utf-8")
    for fraction, code in (("0.99", 2), ("0.98", 2), ("0.97", 0)):
        path.write_text(text.replace('[[dataset.concepts]]', f"[training]\nvalidation_every = 10\n[dataset]\n"
                                     f"validation_fraction = {fraction}\n[[dataset.concepts]]"), encoding="utf-8")
        assert cli_main(["validate", str(path)]) == code, fraction
        err = capsys.readouterr().err
        if code:
            assert f"dataset.validation_fraction = {fraction}: holds out 24 of the 24 training images in " \
                   f"{tmp_path / 'data'}, leaving none to train on; allowed with 24 images: 0 (none held out) up " \
                   "to 0.97 (holds out 23); e.g. 0.1 holds out 2" in err
            assert "Traceback" not in err
            problem = check_dataset(load_resolved(path))  # the Train button and `studio-train run` say it too
            assert problem is not None and problem.message.startswith(
                f"dataset.validation_fraction = {fraction} holds out 24 of the 24 training images")


SIDES = """\
[model]
family = "{family}"
base = "org/model"
[dataset]
resolution = {resolution}
{buckets}
[[dataset.concepts]]
path = "data"
[sampling]
{sampling}
"""


@pytest.mark.parametrize(("family", "resolution", "buckets", "sampling", "said"), [
    ("flux2-klein", 1000, "", "", "dataset.resolution = 1000: FLUX.2 [klein] trains and samples at sides that are a "
                                  "multiple of 16 pixels; use 992 or 1008"),
    ("qwen-image", 1024, "min_bucket = 520", "", "dataset.min_bucket = 520"),
    ("sd3", 1024, "", "size = 520", "sampling.size = 520"),
    ("zimage", 1024, "bucket_step = 40", "", "dataset.bucket_step = 40"),
    ("qwen-image", 1024, "bucket_step = 8", "", "dataset.bucket_step = 8: Qwen-Image trains and samples at sides "
                                                "that are a multiple of 16 pixels; use 16\n"),
])
def test_an_image_side_a_transformer_cannot_patch_is_refused_before_loading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], family: str, resolution: int, buckets: str,
        sampling: str, said: str) -> None:
    # Latents are cut into 2x2 patches: a side of 1000 px (125 latent rows) failed at the first step.
    path = tmp_path / "studio.toml"
    path.write_text(SIDES.format(family=family, resolution=resolution, buckets=buckets, sampling=sampling),
                    encoding="utf-8")
    for command in ("validate", "run"):
        assert cli_main([command, str(path)]) == 2, command
        err = capsys.readouterr().err
        assert said in err and "multiple of 16" in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists()
    # A UNet family takes any multiple of 8.
    path.write_text(SIDES.format(family="sdxl", resolution=1000, buckets="", sampling="size = 520"), encoding="utf-8")
    assert cli_main(["validate", str(path)]) == 0


def test_a_missing_sample_control_image_is_named_before_the_model_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The trainer refused it only once the model had loaded (minutes, for an edit model).
    from PIL import Image

    (tmp_path / "pairs" / "control").mkdir(parents=True)
    for folder in (tmp_path / "pairs", tmp_path / "pairs" / "control"):
        Image.new("RGB", (64, 64)).save(folder / "cat.png")
    (tmp_path / "pairs" / "cat.txt").write_text("make it red", encoding="utf-8")
    path = tmp_path / "studio.toml"
    path.write_text('[model]\nfamily = "flux2-klein"\nbase = "org/model"\n[dataset]\nkind = "edit"\n'
                    '[[dataset.concepts]]\npath = "pairs"\n[sampling]\nevery_n_steps = 10\nprompts = ["make it blue"]\n'
                    'control_image = "held-out/before.png"\n', encoding="utf-8")
    assert cli_main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert (f"The control image {tmp_path / 'held-out' / 'before.png'} (sampling.control_image) is no image file: "
            "choose the image every sample prompt edits, or leave it empty") in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_a_preset_file_given_as_a_config_says_what_it_is_and_how_to_train_with_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A shipped preset copied to start a config, its base and images added: it said "preset: unknown key".
    preset = Path(__file__).resolve().parents[2] / "presets" / "sdxl-lora.toml"
    path = tmp_path / "studio.toml"
    path.write_text(preset.read_text(encoding="utf-8").replace('[model]\n', '[model]\nbase = "org/model"\n')
                    + '\n[[dataset.concepts]]\npath = "data"\n', encoding="utf-8")
    for command in ("validate", "run"):
        assert cli_main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert "1 problem\n" in err and "unknown key" not in err and "Traceback" not in err, err
        assert "preset: this is a preset file: its [preset] table is the card the studio shows" in err
        assert "delete the [preset] table and set model.base" in err


def test_epochs_beside_max_steps_are_refused_as_max_steps_sets_the_length(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Both were accepted and max_steps won: the 20 epochs asked for were never trained.
    path = tmp_path / "studio.toml"
    path.write_text('[model]\nfamily = "sdxl"\nbase = "org/model"\n[[dataset.concepts]]\npath = "data"\n'
                    '[training]\nepochs = 20\nmax_steps = 1500\n', encoding="utf-8")
    for command in ("validate", "run"):
        assert cli_main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert ("line 7: training.epochs = 20: is the run's length in epochs, which acts only with "
                "training.max_steps empty") in err and "Traceback" not in err, err


@pytest.mark.parametrize("family", ["flux2-klein", "zimage", "qwen-image"])
def test_a_separate_vae_a_family_never_loads_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        family: str) -> None:
    # Their trainers load the base model's own VAE: model.vae was accepted and the run trained without it.
    path = tmp_path / "studio.toml"
    text = '[model]\nfamily = "{}"\nbase = "org/model"\nvae = "my-vae.safetensors"\n[[dataset.concepts]]\npath = "data"\n'
    path.write_text(text.format(family), encoding="utf-8")
    for command in ("validate", "run"):
        assert cli_main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert ('line 4: model.vae = "my-vae.safetensors": replaces the base model\'s VAE with another one, '
                "which acts only for family sd15, sdxl, sd3;") in err and "Traceback" not in err, err
    path.write_text(text.format("sdxl"), encoding="utf-8")
    assert cli_main(["validate", str(path)]) == 0


def test_a_caption_extension_training_never_reads_is_refused(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # The Dataset page and the captioner wrote cat.tags; training read cat.txt and cat.caption only.
    path = tmp_path / "studio.toml"
    text = '[model]\nfamily = "sd15"\nbase = "org/model"\n[dataset]\ncaption_extension = "{}"\n'
    path.write_text(text.format(".tags"), encoding="utf-8")
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert ('line 5: dataset.caption_extension = ".tags": training reads captions from .txt and .caption files '
            '(and metadata.jsonl) only') in err and 'choose ".txt" or ".caption"' in err
    path.write_text(text.format("caption"), encoding="utf-8")  # the dot may be left out
    assert cli_main(["validate", str(path)]) == 0
    assert 'caption_extension = ".caption"' in capsys.readouterr().out


def test_the_demo_project_is_not_made_in_a_project_of_ones_own(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path / "my lora")
    before = path.read_text(encoding="utf-8")
    assert cli_main(["demo-project", str(tmp_path / "my lora")]) == 2
    err = capsys.readouterr().err
    assert "is a studio project of your own, not the demo" in err and "Traceback" not in err
    # Not made the demo (its banner, its tiny model) nor given the demo's shapes.
    assert sorted(p.name for p in (tmp_path / "my lora").iterdir()) == ["studio.toml"]
    assert path.read_text(encoding="utf-8") == before


def test_a_folder_that_cannot_be_made_is_named_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "disk").write_text("a file where a folder should be", encoding="utf-8")
    for command in ("demo-data", "demo-project"):
        assert cli_main([command, str(tmp_path / "disk" / "demo")]) == 1, command
        err = capsys.readouterr().err
        assert err.startswith(f"error: {tmp_path / 'disk' / 'demo'}: ") and err.count("\n") == 1, err
        assert err.endswith("; check the path and its permissions\n")  # the system's reason between


def test_a_project_folder_given_for_its_config_names_the_config(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = _config(tmp_path / "my lora")
    for command in ("validate", "command", "run", "estimate"):
        assert cli_main([command, str(path.parent)]) == 2, command
        err = capsys.readouterr().err
        assert f"is a folder, not a config file: give the config inside it, {path}" in err, command
    assert cli_main(["validate", str(tmp_path)]) == 2  # no config in it
    assert "give a config's .toml file (a project's studio.toml)" in capsys.readouterr().err


@pytest.mark.parametrize(("given", "said"), [
    ("https://huggingface.co/org/model-name", " (this link's id is org/model-name)"),
    ("C:\\models\\sdxl", "; a model already on this machine needs no download"),
])
def test_download_of_something_that_is_no_hub_id_says_what_to_give(
        given: str, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # A link copied from the browser, or a folder: refused before any request, in one line.
    from huggingface_hub import constants

    # The download goes online for this process; both are as they were after the test.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
    assert cli_main(["download", given]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {given} is not a hub id: give the id as the model's hub page writes it, org/name")
    assert said in err and "Traceback" not in err
