"""TrainConfig: loading, errors a person can act on, comments kept on save, migrations."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config import errors
from studio.core.config import schema as cfg
from studio.core.config.errors import ConfigError
from studio.core.config.files import paths, toml_file
from studio.core.config.files.toml_file import load_config, save_config, validate_data
from studio.core.config.schema import TrainConfig

MINIMAL = """\
schema_version = 1
# The base model of my character LoRA
[model]
family = "sd15"            # sd15 | sdxl | sd3
base = "models/tiny-sd15"  # diffusers folder, .safetensors file, or hub id
[method]
kind = "lora"              # lora | dreambooth
rank = 4
[dataset]
resolution = 512
[[dataset.concepts]]
path = "data/shapes"
[training]
batch_size = 2
max_steps = 30             # or epochs
seed = 1
mixed_precision = "no"     # no | fp16 | bf16
[output]
dir = "runs"
"""


def write(tmp_path: Path, text: str, name: str = "studio.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def errors_of(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    return [str(issue) for issue in info.value.issues]


def test_minimal_config_from_design_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL))
    assert config.model.family == "sd15"
    assert config.method.rank == 4
    assert config.training.length == ("steps", 30)
    assert config.dataset.concepts[0].path == "data/shapes"


def test_typo_names_the_key_the_line_and_a_suggestion(tmp_path: Path) -> None:
    errors = errors_of(tmp_path, MINIMAL.replace("batch_size = 2", "batchsize = 2"))
    assert len(errors) == 1
    assert "training.batchsize" in errors[0]
    assert "did you mean 'batch_size'" in errors[0]
    assert errors[0].startswith("line 14:")


def test_the_line_named_is_the_key_in_its_own_table(tmp_path: Path) -> None:
    # [sampling] has a seed too, and every concept has a path: the line is the one of the key at fault.
    text = MINIMAL.replace("[model]", "[sampling]\nseed = 7\n[model]").replace("seed = 1\n", "seed = -1\n")
    text += "[[dataset.concepts]]\npath = \"\"\n"
    errors = errors_of(tmp_path, text)
    lines = text.splitlines()
    for key, setting in (("training.seed = -1", "seed = -1"), ("dataset.concepts[1].path", 'path = ""')):
        said = next(e for e in errors if key in e)
        assert said.startswith(f"line {lines.index(setting) + 1}:"), said


def test_a_list_item_or_a_missing_key_is_at_the_line_that_holds_it(tmp_path: Path) -> None:
    text = MINIMAL.replace('path = "data/shapes"', 'repeats = 2').replace(
        "[dataset]", '[dataset]\nkind = "edit"\ncontrol_layout = "separate"\ncontrol_folders = ["a", 5]')
    errors = errors_of(tmp_path, text)
    lines = text.splitlines()
    folders, concept = lines.index('control_folders = ["a", 5]') + 1, lines.index("[[dataset.concepts]]") + 1
    assert any(e.startswith(f"line {folders}: dataset.control_folders[1] = 5") for e in errors), errors
    assert f"line {concept}: dataset.concepts[0].path: is required but missing" in errors


def test_wrong_type_and_range_name_value_and_what_is_allowed(tmp_path: Path) -> None:
    errors = errors_of(
        tmp_path,
        MINIMAL.replace("rank = 4", "rank = 0").replace('"no"     #', '"fp8"  #').replace("batch_size = 2", 'batch_size = "two"'),
    )
    text = "\n".join(errors)
    assert 'method.rank = 0: must be at least 1' in text
    assert "training.mixed_precision = \"fp8\": allowed: 'no', 'fp16' or 'bf16'" in text
    assert 'training.batch_size = "two"' in text


def test_contradiction_names_both_options(tmp_path: Path) -> None:
    text = MINIMAL.replace("rank = 4", "rank = 4\ntrain_text_encoder = true").replace(
        "seed = 1", "seed = 1\ncache_text_embeddings = true"
    )
    errors = errors_of(tmp_path, text)
    assert len(errors) == 1
    assert "training.cache_text_embeddings" in errors[0]
    assert "method.train_text_encoder" in errors[0]


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"training": {"cache_latents": True}, "dataset": {"flip": True}}, "training.cache_latents"),
        ({"training": {"cache_text_embeddings": True}, "dataset": {"shuffle_tags": True}}, "training.cache_text_embeddings"),
        ({"model": {"use_t5": True}}, "model.use_t5"),
        ({"model": {"family": "sdxl", "clip_skip": 2}}, "model.clip_skip"),
        ({"method": {"kind": "dreambooth"}, "output": {"save_every_n_epochs": 1}}, "output.save_every_n_epochs"),
        ({"launch": {"machine_rank": 2, "num_machines": 2, "num_processes": 2}}, "launch.machine_rank"),
        ({"dataset": {"concepts": [{"path": "x", "num_class_images": 10}]}}, "dataset.concepts[0]"),
        ({"launch": {"strategy": "fsdp", "num_processes": 2}}, "launch.strategy"),
        ({"launch": {"strategy": "fsdp"}, "method": {"kind": "dreambooth"}, "training": {"mixed_precision": "fp16"}},
         "launch.strategy"),
        ({"launch": {"strategy": "fsdp"}, "method": {"kind": "dreambooth"}, "training": {"compile": "blocks"}},
         "training.compile"),
        ({"launch": {"strategy": "fsdp"}, "method": {"kind": "dreambooth"}, "training": {"optimizer": "adamw8bit"}},
         "training.optimizer"),
        ({"launch": {"strategy": "fsdp"}, "method": {"kind": "dreambooth"}, "training": {"optimizer": "adafactor"}},
         "training.optimizer"),
        ({"launch": {"strategy": "fsdp"}, "method": {"kind": "dreambooth"},
          "training": {"optimizer": "prodigy", "learning_rate": 1.0}}, "training.optimizer"),
        ({"training": {"checkpointing_interval": 2}}, "training.checkpointing_interval"),
        ({"model": {"fp8_base": True}, "method": {"use_dora": True}}, "model.fp8_base"),
        ({"model": {"text_encoder_on_cpu": True}}, "model.text_encoder_on_cpu"),
        ({"method": {"train_text_encoder": True},
          "training": {"optimizer": "prodigy", "learning_rate": 1.0, "text_encoder_lr": 0.5}},
         "training.text_encoder_lr"),
    ],
)
def test_each_contradiction_is_refused(change: dict, key: str) -> None:
    data: dict = {"model": {"family": "sd15", "base": "m"}}
    for section, values in change.items():
        data.setdefault(section, {}).update(values)
    with pytest.raises(ConfigError) as info:
        validate_data(data)
    assert any(issue.key.startswith(key) for issue in info.value.issues), info.value.describe()


def test_bad_toml_syntax_says_line(tmp_path: Path) -> None:
    errors = errors_of(tmp_path, MINIMAL.replace("rank = 4", "rank = = 4"))
    assert errors[0].startswith("line 8:")
    assert "not valid TOML" in errors[0]


def test_a_windows_path_pasted_in_double_quotes_is_explained(tmp_path: Path) -> None:
    errors = errors_of(tmp_path, MINIMAL.replace('path = "data/shapes"', r'path = "C:\Users\me\Pictures\shapes"'))
    assert errors[0].startswith("line 12:") and "not valid TOML" in errors[0]
    assert "write a Windows path in single quotes, 'C:\\Users\\me\\images', or with forward slashes" in errors[0]
    config = load_config(write(tmp_path, MINIMAL.replace('path = "data/shapes"', r"path = 'C:\Users\me\shapes'")))
    assert config.dataset.concepts[0].path == r"C:\Users\me\shapes"  # as the hint says
    assert "Windows path" not in errors_of(tmp_path, MINIMAL.replace("rank = 4", "rank = = 4"))[0]


def test_a_windows_path_whose_escapes_toml_reads_as_control_characters_is_explained(tmp_path: Path) -> None:
    """"D:\new\train" is valid TOML: a newline and a tab. The run only said its folder did not exist."""
    config = load_config(write(tmp_path, MINIMAL.replace('path = "data/shapes"', r'path = "D:\new\train"')))
    with pytest.raises(ConfigError) as raised:
        paths.resolve_paths(config, tmp_path)
    (issue,) = raised.value.issues
    assert issue.key == "dataset.concepts[0].path" and issue.message.startswith(
        "holds a control character (\\n, \\t read as an escape): in double quotes TOML reads each \\ as the start "
        "of an escape; write a Windows path in single quotes")


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml")


def test_comments_survive_load_edit_save(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    config = load_config(path)
    config.method.rank = 8
    config.training.learning_rate = 3e-4
    save_config(config, path)
    text = path.read_text(encoding="utf-8")
    assert "# The base model of my character LoRA" in text
    assert 'family = "sd15"            # sd15 | sdxl | sd3' in text
    assert "rank = 8" in text
    assert "learning_rate = 0.0003" in text
    again = load_config(path)
    assert again.method.rank == 8 and again.training.learning_rate == pytest.approx(3e-4)
    assert again == config


def test_a_folder_added_or_removed_keeps_the_other_folders_comments(tmp_path: Path) -> None:
    """Adding a folder on the Dataset page wrote every [[dataset.concepts]] table anew: the comments in them
    went, and so did a repeats = 1 written on purpose."""
    path = tmp_path / "studio.toml"
    path.write_text('[model]\nfamily = "sd15"\nbase = "m"\n\n'
                    '[[dataset.concepts]]\npath = "faces"  # close-ups, cropped by hand\nrepeats = 1\n\n'
                    '[[dataset.concepts]]\n# the class images from the old run\npath = "dogs"\n'
                    'class_prompt = "a dog"\nclass_path = "class"\n', encoding="utf-8")
    config = load_config(path)
    config.dataset.concepts = [*config.dataset.concepts, cfg.ConceptSection(path="new")]
    save_config(config, path)
    text = path.read_text(encoding="utf-8")
    assert 'path = "faces"  # close-ups, cropped by hand\nrepeats = 1\n' in text
    assert "# the class images from the old run\n" in text
    assert load_config(path) == config
    config.dataset.concepts = config.dataset.concepts[1:]
    save_config(config, path)
    text = path.read_text(encoding="utf-8")
    assert "faces" not in text and "# the class images from the old run\n" in text
    assert load_config(path) == config


def test_new_file_holds_only_what_differs_from_defaults(tmp_path: Path) -> None:
    config = validate_data({"model": {"family": "sdxl", "base": "m"}, "training": {"batch_size": 3}})
    path = tmp_path / "new.toml"
    save_config(config, path)
    text = path.read_text(encoding="utf-8")
    assert "batch_size = 3" in text
    assert "learning_rate" not in text
    assert load_config(path) == config


def test_newer_schema_version_is_refused_with_advice() -> None:
    with pytest.raises(ConfigError, match="update the studio"):
        validate_data({"schema_version": 99, "model": {"family": "sd15", "base": "m"}})


def test_migration_chain_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def v1_to_v2(data: dict) -> dict:
        data["model"]["base"] = data["model"].pop("checkpoint")
        return data

    monkeypatch.setattr(toml_file, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(toml_file.MIGRATIONS, 1, v1_to_v2)
    migrated = toml_file.migrate({"schema_version": 1, "model": {"family": "sd15", "checkpoint": "old"}})
    assert migrated == {"schema_version": 2, "model": {"family": "sd15", "base": "old"}}


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    (tmp_path / "models" / "tiny-sd15").mkdir(parents=True)
    config = paths.load_resolved(write(tmp_path, MINIMAL))
    assert config.model.base == str(tmp_path / "models" / "tiny-sd15")
    assert config.dataset.concepts[0].path == str(tmp_path / "data" / "shapes")
    assert config.output.dir == str(tmp_path / "runs")
    hub = validate_data({"model": {"family": "sdxl", "base": "stabilityai/stable-diffusion-xl-base-1.0"}})
    assert paths.resolve_paths(hub, tmp_path).model.base == "stabilityai/stable-diffusion-xl-base-1.0"


def test_every_field_has_a_description_for_tooltips() -> None:
    described = cfg.field_descriptions()
    assert "training.learning_rate" in described
    missing = [
        f"{section}.{name}"
        for section, field in TrainConfig.model_fields.items()
        if (sub := errors.section_type(field.annotation)) is not None
        for name, f in sub.model_fields.items()
        if not f.description
    ]
    assert missing == []


def test_sharding_says_why_it_is_refused_and_allows_a_dreambooth() -> None:
    base = {"model": {"family": "sdxl", "base": "m"}, "launch": {"strategy": "fsdp", "num_processes": 2}}
    with pytest.raises(ConfigError) as lora:
        validate_data(base)
    assert "a LoRA's trained weights are a few megabytes" in lora.value.describe()
    assert 'Use strategy "ddp" for LoRA' in lora.value.describe()
    with pytest.raises(ConfigError) as fp16:
        validate_data({**base, "method": {"kind": "dreambooth"}, "training": {"mixed_precision": "fp16"}})
    assert 'use "bf16"' in fp16.value.describe()
    for precision in ("bf16", "no"):
        config = validate_data({**base, "method": {"kind": "dreambooth"}, "training": {"mixed_precision": precision}})
        assert config.launch.strategy == "fsdp"
    # One process shards nothing; the trainer warns, the config is valid (it may be launched with more).
    single = validate_data({**base, "method": {"kind": "dreambooth"}, "launch": {"strategy": "fsdp"}})
    assert single.launch.num_processes == 1


def test_compile_is_off_unless_asked_and_names_what_is_allowed(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, MINIMAL)).training.compile == "off"
    blocks = MINIMAL.replace("batch_size = 2", 'batch_size = 2\ncompile = "blocks"')
    assert load_config(write(tmp_path, blocks)).training.compile == "blocks"
    errors = errors_of(tmp_path, MINIMAL.replace("batch_size = 2", 'batch_size = 2\ncompile = "yes"'))
    assert "training.compile = \"yes\": allowed: 'off', 'blocks', 'full' or 'graphs'" in "\n".join(errors)


def test_the_effective_batch_multiplies_batch_accumulation_and_processes() -> None:
    from studio.core.config.schema import TrainingSection

    training = TrainingSection(batch_size=3, gradient_accumulation=4)
    assert training.effective_batch() == 12 and training.effective_batch(8) == 96
    assert training.effective_batch(0) == 12  # no processes named: one


@pytest.mark.parametrize(("name", "said"), [
    ("nul", "is NUL, a device name on Windows"), ("Con.v2", "is CON, a device name on Windows"),
    ("com1", "is COM1, a device name on Windows"), ("lpt9.x", "is LPT9, a device name on Windows"),
    ("my-run.", "ends in a dot or a space, which Windows drops"),
])
def test_a_run_name_windows_cannot_hold_is_refused_naming_it(tmp_path: Path, name: str, said: str) -> None:
    """The run's LoRA is <output.name>.safetensors in <stamp>-<output.name>/: on Windows nul.safetensors opens the
    device, and the hours of training end with nothing written. Refused on every OS: a project travels."""
    (error,) = errors_of(tmp_path, MINIMAL + f'name = "{name}"\n')
    assert error.startswith(f'line 20: output.name = "{name}": {said}')
    assert error.endswith("the run's folder and files are named after it: choose another name, such as my-lora")
    assert load_config(write(tmp_path, MINIMAL + 'name = "nul-lora"\n')).output.name == "nul-lora"
