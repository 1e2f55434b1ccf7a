"""The sample prompts and captions are measured against what the family's text encoders really read: SD3's T5
reads 256 tokens, but without it (model.use_t5 off, the default) its two CLIP encoders read 75."""

from __future__ import annotations

from pathlib import Path

from studio.core.config.schema import ConceptSection, ModelSection, TrainConfig
from studio.core.dataset.checks import check_concepts
from studio.core.project.sample_prompts import check_sample_prompts

# About a hundred tokens: past CLIP's 75, well within T5's 256.
LONG = " ".join(["word"] * 100)


def _sd3(use_t5: bool) -> TrainConfig:
    config = TrainConfig(model=ModelSection(family="sd3", base="org/sd3", use_t5=use_t5))
    config.sampling.every_n_steps, config.sampling.prompts = 10, ["a red circle", LONG]
    return config


def test_an_sd3_prompt_past_clips_75_tokens_is_named_without_t5_only() -> None:
    problem = check_sample_prompts(_sd3(use_t5=False))
    assert problem is not None and problem.message.startswith(
        "Sample prompt 2 is longer than the 75 tokens CLIP reads: the samples ignore the rest.")
    assert check_sample_prompts(_sd3(use_t5=True)) is None  # T5 reads it all


def test_an_sd3_caption_past_clips_75_tokens_is_named_without_t5_only(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (64, 64)).save(tmp_path / "a.png")
    (tmp_path / "a.txt").write_text(LONG, encoding="utf-8")

    def long_captions(use_t5: bool) -> list[str]:
        report = check_concepts([ConceptSection(path=str(tmp_path))], None, 64, family_name="sd3", use_t5=use_t5)
        return [p.message for p in report.problems if p.code == "long_caption"]

    (said,) = long_captions(use_t5=False)
    assert said.endswith("CLIP reads only the first 75")
    assert long_captions(use_t5=True) == []


def _negative(family_name: str, base: str, guidance: float, prompts: list[str], negative: str = "") -> TrainConfig:
    config = TrainConfig(model=ModelSection(family=family_name, base=base))  # type: ignore[arg-type]
    config.sampling.every_n_steps, config.sampling.prompts = 10, prompts
    config.sampling.guidance, config.sampling.negative_prompt = guidance, negative
    return config


def test_a_negative_prompt_the_pipeline_would_not_read_at_that_guidance_is_named_before_the_run() -> None:
    # The tab's negative prompt at its guidance 1, a prompt's own --n at --l 1, and one drawn at --l 7 (read).
    config = _negative("sd15", "org/sd15", 1.0, ["a cat", "a dog --n ugly --l 7", "a cow --n dark"], "blurry")
    problem = check_sample_prompts(config)
    assert problem is not None and problem.message == (
        "Sample prompts 1 and 3 have a negative prompt that the samples do not use: SD 1.x/2.x draws with a "
        "negative prompt only at a guidance above 1, not at 1. Raise the guidance (the Sample settings tab's, or "
        "a prompt's --l) above 1, or take the negative prompt out.")
    config.sampling.guidance = 5.0
    assert check_sample_prompts(config) is None
    # Z-Image guides above 0: its guidance 1 reads the negative prompt; Z-Image Turbo's 0 does not.
    assert check_sample_prompts(_negative("zimage", "org/z", 1.0, ["a cat --n dark"])) is None
    turbo = check_sample_prompts(_negative("zimage", "org/z", 0.0, ["a cat --n dark"]))
    assert turbo is not None and "only at a guidance above 0, not at 0" in turbo.message


def test_a_distilled_klein_reads_no_negative_prompt_at_any_guidance(tmp_path: Path) -> None:
    import json

    distilled = tmp_path / "klein-4b"
    distilled.mkdir()
    (distilled / "model_index.json").write_text(json.dumps({"_class_name": "Flux2KleinPipeline",
                                                            "is_distilled": True}), encoding="utf-8")
    for base in (str(distilled), "black-forest-labs/FLUX.2-klein-4B"):
        problem = check_sample_prompts(_negative("flux2-klein", base, 4.0, ["a cat --n dark"]))
        assert problem is not None and problem.message == (
            f"Sample prompt 1 has a negative prompt that the samples do not use: {base} has its guidance "
            "distilled into it and draws no negative prompt at any guidance. Take the negative prompt out, or "
            "sample a base model that is not distilled.")
    assert check_sample_prompts(_negative("flux2-klein", "black-forest-labs/FLUX.2-klein-base-4B", 4.0,
                                          ["a cat --n dark"])) is None
