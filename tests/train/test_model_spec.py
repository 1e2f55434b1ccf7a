"""What a LoRA file says about its model comes from the family's declaration: the prediction type a
UI reads to pick its sampler, the implementation id, and the network module sd-scripts names.

The values are sd-scripts' (library/sai_model_spec.py, train_network.py) and, for the families it does
not train, kohya's musubi-tuner's (src/musubi_tuner/utils/sai_model_spec.py); each family's own run
test reads them back from the file it wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from studio.core.config.schema import MethodSection, ModelSection, TrainConfig
from studio.core.families import FAMILIES

torch = pytest.importorskip("torch")

# What a person's model browser shows for a LoRA of each family.
EXPECTED = {
    "sd15": ("epsilon", "diffusers"),
    "sdxl": ("epsilon", "https://github.com/Stability-AI/generative-models"),
    "sd3": ("flow", "diffusers"),
    "flux2-klein": ("flow", "https://github.com/black-forest-labs/flux2"),
    "zimage": ("flow", "https://github.com/Tongyi-MAI/Z-Image"),
    "qwen-image": ("flow", "https://github.com/QwenLM/Qwen-Image"),
}


def _config(family: str, tmp_path: Path, **method: object) -> TrainConfig:
    return TrainConfig(model=ModelSection(family=family, base="org/model"),  # type: ignore[arg-type]
                       method=MethodSection(kind="lora", rank=4, alpha=8, **method),  # type: ignore[arg-type]
                       output={"dir": str(tmp_path), "name": "mine", "formats": ["kohya"]})  # type: ignore[arg-type]


def _written_metadata(config: TrainConfig, folder: Path) -> dict[str, str]:
    """The metadata of the kohya file written for `config` (one small SD1.5 layer stands for the LoRA)."""
    from studio.train.families.kohya import kohya_metadata, kohya_state_dict, save_kohya_file

    layer = "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q"
    layers = {"unet": {f"{layer}.lora_A.weight": torch.zeros(4, 8), f"{layer}.lora_B.weight": torch.zeros(8, 4)}}
    state = kohya_state_dict(layers, {"unet": {"lora_alpha": 8}})
    path = save_kohya_file(folder, "mine", state, kohya_metadata(config, "base", "arch", {}))
    with safe_open(str(path), "pt") as handle:
        return handle.metadata()


def test_every_declared_family_has_its_expected_metadata() -> None:
    assert set(EXPECTED) == {spec.name for spec in FAMILIES}, "a new family needs its row here"


@pytest.mark.parametrize("family", [spec.name for spec in FAMILIES])
def test_the_file_says_what_its_family_predicts(family: str, tmp_path: Path) -> None:
    meta = _written_metadata(_config(family, tmp_path), tmp_path)
    prediction, implementation = EXPECTED[family]
    assert meta["modelspec.prediction_type"] == prediction
    assert meta["modelspec.implementation"] == implementation
    assert meta["ss_network_module"] == "networks.lora"


def test_the_runs_own_title_and_prediction_win_over_the_configs(tmp_path: Path) -> None:
    """The EMA file's title, and the prediction type of an "auto" run's base (outputs.training_metadata)."""
    from studio.train.families.kohya import kohya_metadata

    extra = {"modelspec.title": "mine (EMA)", "modelspec.prediction_type": "v"}
    meta = kohya_metadata(_config("sd15", tmp_path), "sd_v1", "stable-diffusion-v1", extra)
    assert meta["modelspec.title"] == "mine (EMA)" and meta["modelspec.prediction_type"] == "v"


def test_an_auto_run_says_what_the_base_models_scheduler_predicts(tmp_path: Path) -> None:
    from studio.train.families.model_spec import prediction_type

    assert prediction_type(_config("sd15", tmp_path), "v_prediction") == "v"
    assert prediction_type(_config("sd15", tmp_path), "epsilon") == "epsilon"
    assert prediction_type(_config("zimage", tmp_path), None) == "flow"


def test_a_v_prediction_run_says_v_and_a_flow_family_ignores_the_ddpm_setting(tmp_path: Path) -> None:
    v_run = _config("sdxl", tmp_path).model_copy(update={"model": ModelSection(
        family="sdxl", base="org/model", prediction_type="v_prediction")})
    assert _written_metadata(v_run, tmp_path)["modelspec.prediction_type"] == "v"
    # model.prediction_type is refused for flow-matching families; a config built around the check keeps "flow".
    flow = _config("zimage", tmp_path).model_copy(update={"model": ModelSection.model_construct(
        **{**_config("zimage", tmp_path).model.model_dump(), "prediction_type": "v_prediction"})})
    assert _written_metadata(flow, tmp_path)["modelspec.prediction_type"] == "flow"


@pytest.mark.parametrize(("method", "module", "args"), [
    ({"network": "locon"}, "networks.lora", {"conv_dim": "4", "conv_alpha": "4.0"}),
    ({"network": "loha"}, "lycoris.kohya", {"algo": "loha"}),
    ({"network": "lokr"}, "lycoris.kohya", {"algo": "lokr", "factor": "-1"}),
    # DoRA's dora_scale is per output feature: LyCORIS' weight decomposition on the output axis.
    ({"use_dora": True}, "lycoris.kohya", {"algo": "lora", "dora_wd": "True", "wd_on_output": "True"}),
])
def test_the_network_module_is_the_one_that_trains_such_a_file(method: dict[str, object], module: str,
                                                                 args: dict[str, str], tmp_path: Path) -> None:
    meta = _written_metadata(_config("sd15", tmp_path, **method), tmp_path)
    assert meta["ss_network_module"] == module
    assert json.loads(meta["ss_network_args"]) == args
