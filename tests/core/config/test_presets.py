"""Presets: every shipped preset validates, applies, and a person's own are listed beside them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.cli import main as cli
from studio.core.config.errors import ConfigError
from studio.core.config.files.presets import apply_preset, list_presets, load_preset, save_user_preset
from studio.core.config.files.toml_file import validate_data

REQUIRED = {
    ("sd15", "lora"), ("sd15", "dreambooth"), ("sdxl", "lora"),
    ("sdxl", "dreambooth"), ("sd3", "lora"), ("sd3", "dreambooth"),
}


def project_config():
    return validate_data({
        "model": {"family": "sd15", "base": "/models/mine"},
        "dataset": {"concepts": [{"path": "/data/me", "repeats": 5}]},
        "sampling": {"prompts": ["a photo of sks person"]},
        "output": {"name": "mine"},
    })


def test_every_shipped_preset_is_valid() -> None:
    presets = [p for p in list_presets() if not p.user]
    assert presets, "no shipped presets found"
    for preset in presets:
        assert preset.valid, f"{preset.path}: " + "; ".join(map(str, preset.issues))
    assert {(p.family, p.method) for p in presets} >= REQUIRED
    assert any(p.id == "sdxl-lora-8gb" for p in presets)


@pytest.mark.parametrize("preset", [p for p in list_presets() if not p.user], ids=lambda p: p.id)
def test_applying_a_preset_keeps_the_project_and_takes_the_recipe(preset) -> None:
    config = apply_preset(project_config(), preset)
    assert config.model.family == preset.family
    assert config.method.kind == preset.method
    assert config.model.base == "/models/mine"
    assert config.dataset.concepts[0].repeats == 5
    assert config.sampling.prompts == ["a photo of sks person"]
    for key, value in preset.delta.get("training", {}).items():
        assert getattr(config.training, key) == value


def test_low_vram_sdxl_preset_uses_the_memory_savers() -> None:
    preset = next(p for p in list_presets() if p.id == "sdxl-lora-8gb")
    config = apply_preset(project_config(), preset)
    assert config.training.gradient_checkpointing
    assert config.training.optimizer == "adamw8bit"
    assert config.training.cache_text_embeddings
    assert preset.min_vram_gb == 8


def test_broken_preset_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[preset]\ntitle="x"\nfamily="sd15"\nmethod="lora"\nmin_vram_gb=6\n[training]\nlearnig_rate=1\n')
    preset = load_preset(path)
    assert not preset.valid
    assert "training.learnig_rate" in str(preset.issues[0])
    path.write_text("[training]\nbatch_size=1\n")
    with pytest.raises(ConfigError, match=r"\[preset\] table"):
        load_preset(path)


def test_user_preset_is_saved_in_the_config_folder_and_listed(isolated_user_dirs: Path) -> None:
    config = project_config()
    config.method.rank = 64
    preset = save_user_preset("My style LoRA", config)
    assert preset.user and preset.valid
    assert preset.path.parent == isolated_user_dirs / "studio_config_dir" / "presets"
    assert "base" not in preset.path.read_text()
    listed = {p.id: p for p in list_presets()}
    assert listed["my-style-lora"].delta["method"]["rank"] == 64
    reapplied = apply_preset(project_config(), listed["my-style-lora"])
    assert reapplied.method.rank == 64


def test_cli_presets_json_lists_valid_presets(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["presets", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) >= 6
    assert all(p["valid"] for p in listed)
    assert {"id", "title", "family", "method", "min_vram_gb", "tradeoffs"} <= set(listed[0])


def test_cli_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[model]\nfamily = "sd15"\nbase = "m/n"\n[training]\nbatch_size = 2\n')
    assert cli(["validate", str(good)]) == 0
    assert "batch_size = 2" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nfamily = "sd15"\nbase = "m/n"\n[training]\nbatch_sise = 2\n')
    assert cli(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "training.batch_sise" in err and "did you mean 'batch_size'" in err


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli(["--version"])
    assert info.value.code == 0
    assert "studio-train 0.1.0" in capsys.readouterr().out


def test_a_preset_for_a_larger_model_swaps_at_most_all_but_one_of_the_projects_blocks() -> None:
    """The [klein] 9B 8 GB preset swaps 30 of the 9B's 32 blocks: checked against the 9B, and applied to a
    project that keeps its 4B (25 blocks) it swaps 24, where the 4B alone would refuse 30."""
    from studio.core.config.schema import TrainConfig
    from studio.core.families import family

    preset = next(p for p in list_presets() if p.id == "flux2-klein-9b-lora-8gb")
    assert preset.valid, preset.issues
    assert preset.delta["model"]["blocks_to_swap"] == 30
    sizes = family("flux2-klein").size_bases
    for size, swapped in (("9b", 30), ("4b", 24)):
        project = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": sizes[size]}})
        assert apply_preset(project, preset).model.blocks_to_swap == swapped
    with pytest.raises(ValueError, match="has 25 blocks"):
        TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": sizes["4b"], "blocks_to_swap": 30}})


def test_a_preset_keeps_what_the_projects_images_are_and_how_its_runs_are_watched() -> None:
    """Picking a preset for another card kept the image folders but made an edit-pair project a plain image
    set (its targets trained without their controls), dropped the validation folder and the loss masks, and
    turned the samples, the checkpoints and the logs off; a DreamBooth preset leaves the LoRA's per-epoch
    saves out (a full fine-tune has none)."""
    project = validate_data({
        "model": {"family": "flux2-klein", "base": "/models/klein"},
        "dataset": {"concepts": [{"path": "pairs"}], "kind": "edit", "control_layout": "separate",
                    "control_folders": ["controls"], "validation_folder": "held-out", "masks": "folder",
                    "mask_folder": "masks", "caption_extension": ".caption"},
        "training": {"validation_every": 50},
        "sampling": {"prompts": ["make it blue"], "every_n_steps": 100, "at_start": True,
                     "control_image": "before.png"},
        "output": {"save_every_n_steps": 500, "save_every_n_epochs": 1, "keep_last": 10, "log_to": ["tensorboard"]},
    })
    preset = next(p for p in list_presets() if p.id == "flux2-klein-4b-lora-12gb")
    config = apply_preset(project, preset)
    assert (config.dataset.kind, config.dataset.control_layout, config.dataset.control_folders) == (
        "edit", "separate", ["controls"])
    assert (config.dataset.validation_folder, config.training.validation_every) == ("held-out", 50)
    assert (config.dataset.masks, config.dataset.mask_folder) == ("folder", "masks")
    assert config.dataset.caption_extension == ".caption"
    assert (config.sampling.every_n_steps, config.sampling.at_start, config.sampling.control_image) == (
        100, True, "before.png")
    assert (config.output.save_every_n_steps, config.output.save_every_n_epochs, config.output.keep_last,
            config.output.log_to) == (500, 1, 10, ["tensorboard"])
    assert config.dataset.resolution == preset.delta["dataset"]["resolution"]  # the recipe is the preset's

    sd15 = validate_data({"model": {"family": "sd15", "base": "/models/sd15"},
                          "dataset": {"concepts": [{"path": "me"}]}, "output": {"save_every_n_epochs": 1}})
    dreambooth = next(p for p in list_presets() if p.id == "sd15-dreambooth")
    assert apply_preset(sd15, dreambooth).output.save_every_n_epochs == 0


def test_a_persons_preset_leaves_the_projects_folders_out(isolated_user_dirs: Path) -> None:
    config = validate_data({"model": {"family": "sd15", "base": "/models/mine"},
                            "dataset": {"concepts": [{"path": "me"}], "validation_folder": "held-out"},
                            "training": {"validation_every": 50}, "method": {"rank": 32}})
    text = save_user_preset("Mine", config).path.read_text()
    assert "held-out" not in text and "validation_every" not in text and "rank = 32" in text


def test_a_shared_preset_never_sets_what_belongs_to_the_project(isolated_user_dirs: Path) -> None:
    """A preset someone shared, dropped into the presets folder, that names a training interpreter (a program
    Train would run), a VAE or an output folder: applied, it changes the recipe only, even where the project
    leaves those keys empty (the studio's own Python, no separate VAE)."""
    folder = isolated_user_dirs / "studio_config_dir" / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "shared.toml").write_text(
        '[preset]\ntitle = "Shared"\nfamily = "sd15"\nmethod = "lora"\nmin_vram_gb = 6\n'
        '[method]\nrank = 48\n[model]\nvae = "someone/vae"\nrevision = "theirs"\n'
        '[output]\ndir = "/etc"\n[launch]\npython = "/home/someone/not-python"\ncpu = true\n')
    preset = {p.id: p for p in list_presets()}["shared"]
    assert not preset.valid and "launch.python" in " ".join(str(issue) for issue in preset.issues)
    config = apply_preset(project_config(), preset)
    assert config.method.rank == 48
    assert config.launch.python is None and config.launch.cpu is False
    assert config.model.vae is None and config.model.revision is None and config.output.dir == "runs"


def test_a_preset_titled_as_a_windows_device_is_saved_to_a_file_windows_can_hold(isolated_user_dirs: Path) -> None:
    """"Aux" was saved as aux.toml: on Windows that is a device, the save wrote nowhere and the preset was gone."""
    preset = save_user_preset("Aux", project_config())
    assert preset.path.name == "aux-preset.toml" and preset.path.is_file() and preset.title == "Aux"
    assert save_user_preset("COM1", project_config()).path.name == "com1-preset.toml"


def test_a_preset_of_mine_titled_as_a_shipped_ones_id_is_found_by_its_own(isolated_user_dirs: Path) -> None:
    """"SD15 LoRA" saved as the person's own: `studio-train estimate --preset` finds it by the id it was given,
    not the shipped sd15-lora under the same name."""
    from studio.core.config.files.presets import get_preset

    config = project_config()
    config.method.rank = 48
    mine = save_user_preset("SD15 LoRA", config)
    assert mine.id != "sd15-lora"
    assert get_preset(mine.id).user and get_preset(mine.id).delta["method"]["rank"] == 48
    assert not get_preset("sd15-lora").user
    assert save_user_preset("SD15 LoRA", config).path == mine.path  # saved again: the same file
