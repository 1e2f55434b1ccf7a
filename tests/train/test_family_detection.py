"""Which family a diffusers folder or a single checkpoint file is, and the refusal of a mismatch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from studio.core.config.schema import ModelSection
from studio.core.runs.events import Error

torch = pytest.importorskip("torch")

# Tensor names that tell the families apart in single-file checkpoints (the original SGM/LDM layouts).
SINGLE_FILE_KEYS = {
    "sd15": ["model.diffusion_model.input_blocks.0.0.weight",
             "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight"],
    "sdxl": ["model.diffusion_model.input_blocks.0.0.weight", "model.diffusion_model.label_emb.0.0.weight",
             "conditioner.embedders.1.model.ln_final.weight"],
    "sd3": ["model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight",
            "text_encoders.clip_l.transformer.text_model.embeddings.token_embedding.weight"],
}


def _single_file(folder: Path, family: str) -> Path:
    from safetensors.torch import save_file

    path = folder / f"{family}-model.safetensors"
    save_file({key: torch.zeros(1) for key in SINGLE_FILE_KEYS[family]}, str(path))
    return path


def test_folders_are_recognised(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    from studio.train.families.loading import detect_family

    for family, folder in tiny_models.items():
        assert detect_family(folder)[0] == family
    # A pipeline class the studio does not list: the UNet's text_time conditioning still says SDXL.
    renamed = tmp_path / "custom-xl"
    shutil.copytree(tiny_models["sdxl"], renamed)
    index = json.loads((renamed / "model_index.json").read_text())
    index["_class_name"] = "MyCustomPipeline"
    (renamed / "model_index.json").write_text(json.dumps(index))
    assert detect_family(renamed) == ("sdxl", "unet/config.json has SDXL's text_time conditioning")


@pytest.mark.parametrize("family", ["sd15", "sdxl", "sd3"])
def test_single_files_are_recognised_by_their_tensor_names(family: str, tmp_path: Path) -> None:
    from studio.train.families.loading import detect_family

    assert detect_family(_single_file(tmp_path, family))[0] == family


def test_an_sdxl_file_under_sd15_is_refused_naming_both(tmp_path: Path) -> None:
    from studio.train.errors import TrainError
    from studio.train.families.loading import model_source

    path = _single_file(tmp_path, "sdxl")
    with pytest.raises(TrainError) as caught:
        model_source(str(path), "sd15")
    error = caught.value
    assert error.kind == "model" and error.path == str(path)
    assert "is an SDXL model (sdxl" in error.message and "model.family is sd15" in error.message
    assert 'model.family = "sdxl"' in error.hint


def test_sd3_folder_under_an_sdxl_config_fails_the_run(make_config, run_training, events_of, tiny_sd3,
                                                       tmp_path) -> None:
    config = make_config("sdxl", model=ModelSection(family="sdxl", base=str(tiny_sd3)))
    code, run_dir = run_training(config, tmp_path)
    error = next(e for e in events_of(run_dir) if isinstance(e, Error))
    assert code == 1 and error.kind == "model"
    assert "is an SD3 model (sd3" in error.message and "model.family is sdxl" in error.message
