"""A setting that does not act for a config is refused with its key, the family and what to use instead."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from studio.core.config.errors import issues_from_validation
from studio.core.config.files.toml_file import config_to_data
from studio.core.config.rules.acting import inert_settings, resets_for
from studio.core.config.schema import ModelSection, TrainConfig, TrainingSection


def _issue(**sections: dict[str, object]) -> tuple[str, str]:
    data: dict[str, object] = {"model": {"family": "sd3", "base": "x"}, **sections}
    with pytest.raises(ValidationError) as raised:
        TrainConfig.model_validate(data)
    (issue,) = issues_from_validation(raised.value, TrainConfig)
    return issue.key, issue.message


@pytest.mark.parametrize(("key", "value"), [("noise_offset", 0.5), ("min_snr_gamma", 5.0)])
def test_ddpm_settings_are_refused_for_sd3_with_what_to_use(key: str, value: float) -> None:
    found, message = _issue(training={key: value})
    assert found == f"training.{key}"
    assert "acts only for family sd15, sdxl" in message and "sd3 (SD3, trained by flow matching)" in message
    assert "training.timestep_sampling" in message or "training.loss_weighting" in message


def test_the_sd3_run_with_all_three_is_refused() -> None:
    key, message = _issue(model={"family": "sd3", "base": "x", "prediction_type": "v_prediction"},
                          training={"noise_offset": 0.5, "min_snr_gamma": 5.0})
    assert key == "model.prediction_type" and "velocity" in message
    config = TrainConfig.model_construct(
        model=ModelSection.model_construct(family="sd3", base="x", prediction_type="v_prediction",
                                           **{k: v.default for k, v in ModelSection.model_fields.items()
                                              if k not in ("family", "base", "prediction_type")}),
        training=TrainingSection.model_construct(noise_offset=0.5, min_snr_gamma=5.0))
    assert [k for k, _v, _why in inert_settings(config)] == [
        "model.prediction_type", "training.noise_offset", "training.min_snr_gamma"]


def test_flow_settings_are_refused_for_ddpm_families() -> None:
    data = {"model": {"family": "sdxl", "base": "x"}, "training": {"loss_weighting": "cosmap"}}
    with pytest.raises(ValidationError, match="acts only for family sd3"):
        TrainConfig.model_validate(data)


def test_a_setting_that_needs_another_says_which() -> None:
    key, message = _issue(training={"timestep_sampling": "uniform", "logit_std": 2.0})
    assert key == "training.logit_std" and 'training.timestep_sampling = "logit_normal"' in message
    TrainConfig.model_validate({"model": {"family": "sd3", "base": "x"},
                                "training": {"timestep_sampling": "mode", "mode_scale": 0.5, "shift": 6.0}})


def test_lora_settings_are_refused_for_dreambooth() -> None:
    key, message = _issue(method={"kind": "dreambooth", "rank": 8})
    assert key == "method.rank" and "method.kind = lora" in message


def test_a_change_resets_what_it_makes_inert() -> None:
    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x", "clip_skip": 2},
                                         "training": {"noise_offset": 0.1}, "method": {"rank": 8}})
    assert resets_for(config, {"model.family": "sd3"}) == {"training.noise_offset": 0.0, "model.clip_skip": 1,
                                                          "sampling.steps": 28, "sampling.guidance": 5.0}
    assert resets_for(config, {"method.kind": "dreambooth"}) == {"method.rank": 16}


def test_the_samples_steps_and_guidance_are_the_familys_own_unless_chosen() -> None:
    """Every family sampled at guidance 7 and 20 steps where a config named none: a FLUX.2 [klein] project made
    without a preset, or switched from SD1.5, sampled its LoRA at guidance 7 (burnt pictures; its own is 4)."""
    klein = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": "x"}})
    assert (klein.sampling.steps, klein.sampling.guidance) == (28, 4.0)
    chosen = TrainConfig.model_validate({"model": {"family": "flux2-klein", "base": "x"},
                                         "sampling": {"guidance": 7.0}})
    assert (chosen.sampling.steps, chosen.sampling.guidance) == (28, 7.0)
    assert config_to_data(chosen)["sampling"] == {"guidance": 7.0}  # read back as chosen
    assert "sampling" not in config_to_data(klein)  # the family's own: read back the same
    sd15 = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"}})
    assert resets_for(sd15, {"model.family": "flux2-klein"}) == {"sampling.steps": 28, "sampling.guidance": 4.0}
    own = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"}, "sampling": {"guidance": 5.5}})
    assert resets_for(own, {"model.family": "flux2-klein"}) == {"sampling.steps": 28}  # 5.5 was the person's


def test_every_settings_default_is_the_schemas_own_and_a_fresh_copy() -> None:
    """default_of calls the schema's factories itself (fast); it must give what pydantic would."""
    from studio.core.config.rules.acting import default_of

    config = TrainConfig.model_validate({"model": {"family": "sd15", "base": "x"}})
    checked = 0
    for section_name, section_field in TrainConfig.model_fields.items():
        section_type = section_field.annotation
        if not isinstance(section_type, type) or not hasattr(section_type, "model_fields"):
            continue
        for name, field in section_type.model_fields.items():
            key = f"{section_name}.{name}"
            assert default_of(config, key) == field.get_default(call_default_factory=True), key
            if field.default_factory is not None:
                assert default_of(config, key) is not default_of(config, key), key  # never shared
            checked += 1
    assert checked > 80


@pytest.mark.parametrize("name", ["zimage", "flux2-klein", "qwen-image"])
def test_a_separate_vae_is_refused_where_the_family_encodes_with_its_own(name: str) -> None:
    """These families load their folder's VAE whatever model.vae says: a file naming one trained with the base's."""
    key, message = _issue(model={"family": name, "base": "x", "vae": "other-vae"})
    assert key == "model.vae" and f"{name} (" in message and "vae/" in message
    for kept in ("sd15", "sdxl", "sd3"):
        assert TrainConfig.model_validate({"model": {"family": kept, "base": "x", "vae": "other-vae"}}).model.vae


def test_sd3_blocks_are_refused_for_dreambooth() -> None:
    """method.blocks limits an SD3 LoRA to some blocks; an SD3 DreamBooth run that said blocks = [0, 1] trained
    every block of the transformer, nothing said."""
    key, message = _issue(method={"kind": "dreambooth", "blocks": [0, 1]})
    assert key == "method.blocks" and "method.kind = lora, not dreambooth" in message
    assert "trains every block" in message
    config = TrainConfig.model_validate({"model": {"family": "sd3", "base": "x"}, "method": {"blocks": [0, 1]}})
    assert resets_for(config, {"method.kind": "dreambooth"}).get("method.blocks") == []


def test_another_family_leaves_the_separate_vae_behind() -> None:
    """An SDXL project with the fp16-safe SDXL VAE switched to SD3 (which takes a separate VAE too) kept it: SD3
    then encoded its images with a VAE of four latent channels where its transformer reads sixteen."""
    from studio.core.config.files.presets import apply_preset, list_presets

    sdxl = TrainConfig.model_validate({"model": {"family": "sdxl", "base": "/models/sdxl",
                                                 "vae": "madebyollin/sdxl-vae-fp16-fix"}})
    assert resets_for(sdxl, {"model.family": "sd3"}) == {"model.vae": None, "sampling.steps": 28,
                                                         "sampling.guidance": 5.0}
    assert resets_for(sdxl, {"training.batch_size": 2}) == {}
    presets = {p.id: p for p in list_presets(include_user=False)}
    assert apply_preset(sdxl, presets["sd3-lora"]).model.vae is None
    assert apply_preset(sdxl, presets["sdxl-lora"]).model.vae == "madebyollin/sdxl-vae-fp16-fix"
