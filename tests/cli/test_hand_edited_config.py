"""A config edited in a text editor and given to `studio-train`: each mistake is one message on stderr that
names the key and the line, exit code 2, and no traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from studio.cli import main as cli_main

CONFIG = """\
schema_version = 1
[model]
family = "sd15"
base = "org/model"
[[dataset.concepts]]
path = "data"
[training]
seed = 1
max_steps = 30
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "studio.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["validate", "run", "estimate"])
def test_a_key_set_twice_in_a_table_names_the_key_and_its_second_line(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The seed line copied to try another value, the old one left above it.
    path = _write(tmp_path, CONFIG.replace("seed = 1\n", "seed = 1\nseed = 2\n"))
    assert cli_main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert "line 9: training.seed: is set twice in the same table; delete one of the two lines" in err
    assert "Traceback" not in err


def test_a_concepts_key_set_twice_is_named_with_its_concept(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    text = CONFIG.replace('path = "data"\n', 'path = "data"\n[[dataset.concepts]]\npath = "more"\nrepeats = 2\n'
                                            'repeats = 3\n')
    assert cli_main(["validate", str(_write(tmp_path, text))]) == 2
    assert "line 10: dataset.concepts[1].repeats: is set twice" in capsys.readouterr().err


@pytest.mark.parametrize(("typed", "shown"), [("seed = 2024-01-01", "2024-01-01"), ("seed = inf", None)])
def test_validate_json_of_a_value_json_lacks_is_valid_json(tmp_path: Path, typed: str, shown: str | None,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    # A date typed where the seed goes, or inf: `validate --json` is read by scripts, so its stdout stays JSON.
    path = _write(tmp_path, CONFIG.replace("seed = 1", typed))
    assert cli_main(["validate", "--json", str(path)]) == 2
    out = capsys.readouterr().out
    report = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert report["valid"] is False
    assert [(i["key"], i["value"], i["line"]) for i in report["issues"]] == [("training.seed", shown, 8)]


def test_an_own_preset_with_a_key_set_twice_leaves_the_others_listed(capsys: pytest.CaptureFixture[str]) -> None:
    from studio.core.user_dirs import config_dir

    folder = config_dir() / "presets"
    folder.mkdir(parents=True)
    (folder / "mine.toml").write_text(
        '[preset]\ntitle = "Mine"\nfamily = "sd15"\nmethod = "lora"\nmin_vram_gb = 8\n'
        "[training]\nlearning_rate = 1e-4\nlearning_rate = 2e-4\n", encoding="utf-8")
    assert cli_main(["presets"]) == 0
    assert "sd15-lora " in capsys.readouterr().out


def test_a_table_header_over_a_key_already_set_names_the_header_line(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    text = CONFIG.replace("[training]\n", "[model.base]\nrevision = \"main\"\n[training]\n")
    assert cli_main(["validate", str(_write(tmp_path, text))]) == 2
    assert "line 7: model.base: is set twice in the same table" in capsys.readouterr().err


def test_a_table_written_twice_says_to_move_its_keys_under_the_first(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    text = CONFIG + "[output]\ndir = \"runs\"\n[training]\nlearning_rate = 1e-4\n"
    assert cli_main(["validate", str(_write(tmp_path, text))]) == 2
    assert ("line 12: training: the table [training] is written twice; move the keys under this header to the "
            "first one and delete it") in capsys.readouterr().err


def test_a_windows_path_whose_backslashes_read_as_escapes_is_shown_as_typed_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "E:\training\new" is valid TOML: \t and \n are a tab and a line break there.
    path = _write(tmp_path, CONFIG.replace('path = "data"', 'path = "E:\\training\\new"'))
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: 1 problem\n")
    assert '  - line 6: dataset.concepts[0].path = "E:\\training\\new": holds a control character' in err
    assert len(err.splitlines()) == 2  # the value is not broken over lines


@pytest.mark.parametrize(("edit", "said"), [
    (('[[dataset.concepts]]', '[dataset.concepts]'),
     "line 5: dataset.concepts: is a list of tables: write the header of each one in double brackets, "
     "[[dataset.concepts]]"),
    (("[training]", "[[training]]"),
     "line 7: training: is one table: write its header in single brackets, [training], not [[training]]"),
    (("max_steps = 30\n", 'max_steps = 30\n[sampling]\nprompts = "a red circle"\n'),
     'line 11: sampling.prompts = "a red circle": must be a list: write it in brackets, ["a red circle"]'),
])
def test_a_table_or_list_written_the_wrong_way_says_how_to_write_it(
        tmp_path: Path, edit: tuple[str, str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, CONFIG.replace(*edit))
    assert cli_main(["validate", str(path)]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(("edit", "said"), [
    # resolution written under [training]
    (("max_steps = 30\n", "max_steps = 30\nresolution = 1024\n"),
     "line 10: training.resolution: unknown key; it is a key of [dataset]: move it under that table's header"),
    # a [dataset] key after the concept's header, which takes every key below it
    (('path = "data"\n', 'path = "data"\ncaption_extension = ".caption"\n'),
     "line 7: dataset.concepts[0].caption_extension: unknown key; it is a key of [dataset]: move it under that "
     "table's header"),
    (("[model]\n", "[model]\nrepeats = 3\n"),
     "line 3: model.repeats: unknown key; it is a key of [[dataset.concepts]]: move it under that table's header"),
])
def test_a_key_under_the_wrong_table_names_the_table_it_belongs_to(
        tmp_path: Path, edit: tuple[str, str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["validate", str(_write(tmp_path, CONFIG.replace(*edit)))]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "did you mean 'caption_source'" not in err  # not a near name of the table it was written in


def test_a_price_set_twice_in_the_gpu_catalogue_names_its_line(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from studio.core.export.gpu_catalogue import shipped_catalogue_path

    # The person's copy of the catalogue, a price line copied to change it and the old one left above.
    text = shipped_catalogue_path().read_text(encoding="utf-8")
    first = text.index("price_min = ")
    line = text[first:text.index("\n", first)]
    catalogue = tmp_path / "gpus.toml"
    catalogue.write_text(text.replace(line, f"{line}\nprice_min = 0.5", 1), encoding="utf-8")
    config = _write(tmp_path, CONFIG)
    assert cli_main(["cost", str(config), "--catalogue", str(catalogue)]) == 2
    err = capsys.readouterr().err
    number = text[:first].count("\n") + 2
    assert f"  - line {number}: gpu[0].price_min: is set twice in the same table; delete one of the two lines" in err
    assert "Traceback" not in err


def test_a_remote_machine_set_twice_in_its_file_is_one_line_to_fix(capsys: pytest.CaptureFixture[str]) -> None:
    from studio.core.remote.machines import machines_path

    machines_path().parent.mkdir(parents=True, exist_ok=True)
    machines_path().write_text('[machines.box]\nhost = "10.0.0.2"\nhost = "10.0.0.3"\n', encoding="utf-8")
    assert cli_main(["remote", "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read {machines_path()}: ") and "fix or delete the file" in err


@pytest.mark.parametrize("edit", [
    ("[model]\n", '[model]\nvae = ""\n'),  # "no separate VAE": TOML has no none
    ('path = "data"\n', 'path = "data"\nclass_path = ""\n'),
    ("[[dataset.concepts]]", '[dataset]\nvalidation_folder = ""\n[[dataset.concepts]]'),
])
def test_an_optional_path_written_empty_is_none_not_the_projects_folder(
        tmp_path: Path, edit: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["validate", str(_write(tmp_path, CONFIG.replace(*edit)))]) == 0
    resolved = capsys.readouterr().out
    assert "valid" in resolved and f'"{tmp_path}"' not in resolved  # no VAE, class images or held-out images there


@pytest.mark.parametrize(("edit", "said"), [
    (("max_steps = 30\n", 'max_steps = 30\n[output]\nname = "my first lora"\n'),
     'line 11: output.name = "my first lora": does not have the form this key takes: Run name (letters, digits, '
     '. _ -; at most 100).'),
    (("max_steps = 30\n", 'max_steps = 30\n[launch]\ngpu_ids = "0, 1"\n'),
     'line 11: launch.gpu_ids = "0, 1": does not have the form this key takes: GPUs to use: all or e.g. 0,1.'),
])
def test_a_value_of_the_wrong_form_says_the_form_in_words_not_a_regular_expression(
        tmp_path: Path, edit: tuple[str, str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["validate", str(_write(tmp_path, CONFIG.replace(*edit)))]) == 2
    err = capsys.readouterr().err
    assert said in err and "pattern" not in err


def test_an_empty_output_folder_is_refused_not_read_as_the_project_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Resolved, "" named the config's own folder: every run folder made among the project's files.
    path = _write(tmp_path, CONFIG + '[output]\ndir = ""\n')
    assert cli_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert 'line 11: output.dir = "": is empty' in err and '"runs" (the default)' in err and "Traceback" not in err


def test_an_empty_control_folder_is_refused_not_read_as_the_project_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = CONFIG.replace('family = "sd15"', 'family = "qwen-image"').replace(
        "[[dataset.concepts]]", '[dataset]\nkind = "edit"\ncontrol_layout = "separate"\n'
                                'control_folders = ["controls", ""]\n[[dataset.concepts]]')
    assert cli_main(["validate", str(_write(tmp_path, text))]) == 2
    err = capsys.readouterr().err
    assert 'dataset.control_folders[1] = "": is empty' in err and "Traceback" not in err


def test_gpu_ids_written_as_a_toml_list_says_how_to_write_them(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, CONFIG + "[launch]\ngpu_ids = [0, 1]\n")
    assert cli_main(["validate", str(path)]) == 2
    assert 'line 11: launch.gpu_ids = [0, 1]: is one string of GPU numbers joined by commas: write gpu_ids = "0,1"' \
        in capsys.readouterr().err


def test_a_main_address_with_a_space_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, CONFIG + '[launch]\nmain_process_ip = "10.0.0.1 10.0.0.2"\n')
    assert cli_main(["validate", str(path)]) == 2
    assert "launch.main_process_ip = \"10.0.0.1 10.0.0.2\": value error, '10.0.0.1 10.0.0.2' holds a space" \
        in capsys.readouterr().err


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_model_file_given_for_the_config_is_said_to_be_no_config(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\x58\x00\x00\x00\x00\x00\x00\x00" + b'{"w": {}}' + bytes(range(256)))
    assert cli_main([command, str(weights)]) == 2
    err = capsys.readouterr().err
    assert "is not a config file (it holds binary data, such as a model's weights)" in err
    assert "UTF-8" not in err and "Traceback" not in err


@pytest.mark.skipif(os.name != "posix", reason="making a link needs no privilege on POSIX only")
def test_a_linked_config_reads_its_paths_from_the_folder_it_was_given_in(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One config shared by two projects through a link in each: each project trains its own images into its runs.
    (tmp_path / "shared").mkdir()
    shared = _write(tmp_path / "shared", CONFIG)
    for name in ("cats", "dogs"):
        project = tmp_path / name
        (project / "data").mkdir(parents=True)
        (project / "studio.toml").symlink_to(shared)
        assert cli_main(["validate", "--json", str(project / "studio.toml")]) == 0
        config = json.loads(capsys.readouterr().out)["config"]
        assert config["dataset"]["concepts"][0]["path"] == str(project.resolve() / "data")
        assert config["output"]["dir"] == str(project.resolve() / "runs")


def test_validate_names_a_dataset_folder_and_a_base_model_that_are_not_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Checked before a night's queue: the file is valid, but the run would be refused when its turn came.
    path = _write(tmp_path, CONFIG.replace('base = "org/model"', 'base = "models/sdxl-base"'))
    assert cli_main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    assert "valid, but `studio-train run` would refuse to start here" in captured.out
    assert f"warning: run would refuse to start: Base model {tmp_path / 'models' / 'sdxl-base'} does not exist" \
        in captured.err
    assert f"warning: run would refuse to start: Image folder {tmp_path / 'data'} does not exist" in captured.err
    assert cli_main(["validate", "--json", str(path)]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["valid"] and len(said["warnings"]) == 2 and "does not exist" in said["warnings"][0]
