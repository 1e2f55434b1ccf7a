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
