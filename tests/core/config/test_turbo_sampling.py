"""Z-Image Turbo's samples are drawn as the distilled model is sampled (8 steps, no guidance), not with the base
Z-Image's 28 steps at guidance 4, unless the person chose theirs: 28 steps at guidance 4 of a step-distilled model
made samples that said nothing about the LoRA."""

from __future__ import annotations

import pytest

from studio.core.config.files.presets import apply_preset, list_presets
from studio.core.config.files.toml_file import config_to_data
from studio.core.config.rules.acting import resets_for
from studio.core.config.schema import TrainConfig
from studio.core.families.zimage import is_turbo

TURBO = "Tongyi-MAI/Z-Image-Turbo"


def _config(base: str, **sampling: object) -> TrainConfig:
    data: dict[str, object] = {"model": {"family": "zimage", "base": base}}
    if sampling:
        data["sampling"] = sampling
    return TrainConfig.model_validate(data)


def test_a_turbo_base_is_sampled_with_its_own_steps_and_guidance_unless_chosen() -> None:
    turbo = _config(TURBO)
    assert (turbo.sampling.steps, turbo.sampling.guidance) == (8, 0.0)
    assert "sampling" not in config_to_data(turbo)  # the base's own: read back the same
    base = _config("Tongyi-MAI/Z-Image")
    assert (base.sampling.steps, base.sampling.guidance) == (28, 4.0)
    chosen = _config(TURBO, steps=28, guidance=4.0)
    assert (chosen.sampling.steps, chosen.sampling.guidance) == (28, 4.0)
    assert config_to_data(chosen)["sampling"] == {"steps": 28, "guidance": 4.0}  # the person's: written, read back


@pytest.mark.parametrize(("base", "turbo"), [
    (TURBO, True), ("someone/Z-Image-Turbo", True), ("/models/Z-Image-Turbo/", True),
    ("D:\\models\\z_image_turbo", True),
    ("/home/me/.cache/huggingface/hub/models--Tongyi-MAI--Z-Image-Turbo/snapshots/0123abcd", True),
    ("Tongyi-MAI/Z-Image", False), ("/home/me/.cache/huggingface/hub/models--Tongyi-MAI--Z-Image/snapshots/0123", False),
    ("/home/me/z-image-turbo-runs/Z-Image", False),
])
def test_turbo_is_told_by_the_name_of_its_hub_id_or_folder(base: str, turbo: bool) -> None:
    assert is_turbo(base) is turbo


def test_choosing_the_turbo_base_brings_its_sampling_where_the_old_one_was_left() -> None:
    base = _config("Tongyi-MAI/Z-Image")
    assert resets_for(base, {"model.base": TURBO}) == {"sampling.steps": 8, "sampling.guidance": 0.0}
    assert resets_for(_config(TURBO), {"model.base": "Tongyi-MAI/Z-Image"}) == {"sampling.steps": 28,
                                                                               "sampling.guidance": 4.0}
    own = _config("Tongyi-MAI/Z-Image", steps=12)
    assert resets_for(own, {"model.base": TURBO}) == {"sampling.guidance": 0.0}  # 12 steps were the person's


def test_a_z_image_preset_on_a_turbo_project_keeps_turbo_s_sampling() -> None:
    preset = next(p for p in list_presets(include_user=False) if p.family == "zimage")
    assert preset.delta["sampling"]["steps"] == 28  # the family's own, written in the preset
    applied = apply_preset(_config(TURBO), preset)
    assert (applied.sampling.steps, applied.sampling.guidance) == (8, 0.0)
    assert (apply_preset(_config("Tongyi-MAI/Z-Image"), preset).sampling.steps) == 28
