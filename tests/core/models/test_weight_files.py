"""Weight files read from their headers alone: a file cut short and a config asking for more layers than
its weights hold are named with what to do; complete files and matching configs pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.core.models.files import detect_model
from studio.core.models.weight_files import component_weight_problem

np = pytest.importorskip("numpy")
safetensors_numpy = pytest.importorskip("safetensors.numpy")


def write_blocks(folder: Path, name: str, prefix: str, count: int, config: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / name
    safetensors_numpy.save_file({f"{prefix}.{i}.weight": np.ones((4, 4), np.float32) for i in range(count)},
                                str(file))
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return file


def test_a_single_checkpoint_file_cut_short_is_refused_with_what_to_do(tmp_path: Path) -> None:
    file = write_blocks(tmp_path, "model.safetensors", "blocks", 3, {})
    assert detect_model(file).damaged is None
    size = file.stat().st_size
    file.write_bytes(file.read_bytes()[:-20])
    info = detect_model(file)
    assert info.refused == (f"{file} is cut short: it holds {size - 20:,} bytes, its header says {size:,}; "
                            "download the model again (the file was cut off while downloading or copying)")


@pytest.mark.parametrize(("key", "prefix"), [("num_hidden_layers", "text_model.encoder.layers"),
                                             ("num_layers", "encoder.block"), ("num_layers", "transformer_blocks"),
                                             ("num_single_layers", "single_transformer_blocks")])
def test_every_layer_count_is_compared_with_the_weights_it_counts(tmp_path: Path, key: str, prefix: str) -> None:
    write_blocks(tmp_path / "fits", "model.safetensors", prefix, 2, {key: 2})
    assert component_weight_problem(tmp_path / "fits") is None
    write_blocks(tmp_path / "more", "model.safetensors", prefix, 2, {key: 5})
    problem = component_weight_problem(tmp_path / "more")
    assert problem is not None and problem.path == str(tmp_path / "more" / "config.json")
    assert f"says {key} = 5, but its weights (model.safetensors) hold 2 ({prefix.rsplit('.', 1)[-1]}.0 to" \
        in problem.why


def test_a_folder_of_fp16_files_only_asks_for_model_variant_before_train(tmp_path: Path) -> None:
    """A diffusers folder downloaded as its fp16 files alone (unet/diffusion_pytorch_model.fp16.safetensors, no
    plain file beside it) fails to load without model.variant = "fp16": the pre-flight names the file and the
    setting; with the setting, or with the plain files there, it passes."""
    from fixtures.checkpoints import write_checkpoint

    from studio.core.config.schema import ModelSection, TrainConfig
    from studio.core.project.preflight import check_model

    folder = tmp_path / "sd15-fp16"
    folder.mkdir()
    (folder / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')
    (folder / "unet").mkdir()
    (folder / "unet" / "config.json").write_text("{}")
    write_checkpoint(folder / "unet" / "diffusion_pytorch_model.fp16-00001-of-00002.safetensors", {"a": [4]})
    write_checkpoint(folder / "unet" / "diffusion_pytorch_model.fp16-00002-of-00002.safetensors", {"b": [4]})
    write_checkpoint(folder / "text_encoder" / "model.fp16.safetensors", {"c": [4]})
    problem = check_model(TrainConfig(model=ModelSection(family="sd15", base=str(folder))))
    assert problem is not None and problem.message == (
        f"Base model folder {folder} holds text_encoder's weights only as fp16 files "
        f"({folder / 'text_encoder' / 'model.fp16.safetensors'}): set model.variant = \"fp16\", or download the model's "
        "full-precision files.")
    assert check_model(TrainConfig(model=ModelSection(family="sd15", base=str(folder), variant="fp16"))) is None
    write_checkpoint(folder / "text_encoder" / "model.safetensors", {"c": [4]})
    write_checkpoint(folder / "unet" / "diffusion_pytorch_model.safetensors", {"a": [4]})
    assert check_model(TrainConfig(model=ModelSection(family="sd15", base=str(folder)))) is None
