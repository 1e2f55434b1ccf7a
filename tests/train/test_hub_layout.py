"""Model folders the studio writes name their weights as the published checkpoints do (transformers 4.x
loads them as well as 5.x); the LoRA files' checks sit beside each family's LoRA run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.hub_layout import assert_folder_in_hub_layout, file_keys

from studio.core.config.schema import MethodSection, OutputSection, TrainingSection

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("family", ["sd15", "sdxl", "sd3"])
def test_the_tiny_models_are_in_the_hub_layout(tiny_models: dict[str, Path], family: str) -> None:
    checked = assert_folder_in_hub_layout(tiny_models[family], family)
    assert {"vae", "text_encoder"} <= set(checked)
    keys = file_keys(tiny_models[family] / "text_encoder" / "model.safetensors")
    assert "text_model.final_layer_norm.weight" in keys and "final_layer_norm.weight" not in keys


def _flattened_copy(tiny: Path, folder: Path) -> Path:
    """The tiny model as transformers 5 writes a CLIPTextModel it built itself: no text_model. level."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny, folder)
    weights = folder / "text_encoder" / "model.safetensors"
    state = load_file(str(weights))
    save_file({k.removeprefix("text_model."): v for k, v in state.items()}, str(weights), metadata={"format": "pt"})
    return folder


def test_a_dreambooth_folder_is_written_in_the_hub_layout_whatever_the_base(make_config, run_training,
                                                                            tiny_sd15: Path, tmp_path: Path) -> None:
    from studio.core.config.schema import ModelSection

    base = _flattened_copy(tiny_sd15, tmp_path / "flat-sd15")
    assert not any(k.startswith("text_model.") for k in file_keys(base / "text_encoder" / "model.safetensors"))
    config = make_config(model=ModelSection(family="sd15", base=str(base)),
                         method=MethodSection(kind="dreambooth", train_text_encoder=True),
                         training=TrainingSection(batch_size=2, max_steps=1, learning_rate=1e-4, seed=1),
                         output=OutputSection(dir=str(tmp_path / "runs")))
    code, run_dir = run_training(config, tmp_path)
    assert code == 0
    output = run_dir / "output"
    assert {"unet", "vae", "text_encoder"} <= set(assert_folder_in_hub_layout(output, "sd15"))
    # The files transformers 4.x's CLIPTokenizer reads, as the hub's folders have them.
    assert (output / "tokenizer" / "vocab.json").is_file() and (output / "tokenizer" / "merges.txt").is_file()
