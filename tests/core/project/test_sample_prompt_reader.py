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
