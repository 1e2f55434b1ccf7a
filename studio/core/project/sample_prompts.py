"""The sample prompts checked before a run: what the text encoder would read otherwise than the person meant."""

from __future__ import annotations

import re

from studio.core.config.prompt_options import sample_draws
from studio.core.config.schema import TrainConfig
from studio.core.dataset.captions.caption_tags import estimate_tokens
from studio.core.families import family
from studio.core.project.problems import PreflightProblem

# Other programs' prompt syntax: a weighted word "(red hair:1.3)" and a LoRA tag "<lora:style:0.8>".
_PROMPT_MARKUP = re.compile(r"\([^()]*:\s*[0-9.]+\s*\)|<lora:[^>]*>", re.IGNORECASE)


def check_sample_prompts(config: TrainConfig) -> PreflightProblem | None:
    """Sample prompts the text encoder would read otherwise than the person meant: weights and LoRA tags of other
    programs ("(red:1.3)", "<lora:style:0.8>"), read as words, and a prompt past the family's token limit, whose
    end the encoder never reads. A prompt's own options ("--n blurry --w 768") are not its words: they are
    drawn as its settings (config/prompt_options.py), and one the samples do not take is refused at load."""
    sampling = config.sampling
    if not ((sampling.every_n_steps or sampling.at_start) and sampling.prompts):
        return None
    spec = family(config.model.family)
    long: list[str] = []
    markup: dict[str, None] = {}
    with_markup: list[str] = []
    limit, encoder = spec.text_reader(config.model.use_t5)
    draws = sample_draws(sampling, config.dataset.resolution, spec.pixel_multiple)
    for number, draw in enumerate(draws, 1):
        written = _PROMPT_MARKUP.findall(draw.text)
        if written:
            markup.update(dict.fromkeys(written))
            with_markup.append(str(number))
        if estimate_tokens(draw.text) > limit:
            long.append(str(number))
    said: list[str] = []
    if with_markup:
        said.append(f"{_prompts_named(with_markup)} {', '.join(list(markup)[:3])}: weights and LoRA tags of other "
                    "programs' prompts, which the samples read as plain words (what is trained is always drawn "
                    "at its full strength). Write the words alone")
    if long:
        said.append(f"{_prompts_named(long, 'are', 'is')} longer than the {limit} tokens "
                    f"{encoder} reads: the samples ignore the rest. Shorten them or put the important "
                    "words first")
    unread = unread_negative_prompts(config)
    if unread:
        said.append(unread)
    if not said:
        return None
    return PreflightProblem("sample_prompts", ". ".join(said) + ".", can_confirm=True)


def unread_negative_prompts(config: TrainConfig) -> str:
    """The sample prompts whose negative prompt (the Sample settings tab's, or a prompt's own --n) their family's
    pipeline will not read, in a sentence that says why and what to do; empty when every one is read."""
    spec = family(config.model.family)
    base = config.model.base
    draws = sample_draws(config.sampling, config.dataset.resolution, spec.pixel_multiple)
    unread = [(str(number), draw.guidance) for number, draw in enumerate(draws, 1)
              if draw.negative.strip() and not spec.reads_negative_prompt(base, draw.guidance)]
    if not unread:
        return ""
    numbers = [number for number, _guidance in unread]
    start = f"{_prompts_named(numbers, 'have', 'has')} a negative prompt that the samples do not use"
    if spec.guidance_distilled(base):
        return (f"{start}: {base} has its guidance distilled into it and draws no negative prompt at any "
                "guidance. Take the negative prompt out, or sample a base model that is not distilled")
    guidances = ", ".join(dict.fromkeys(f"{guidance:g}" for _number, guidance in unread))
    above = f"{spec.negative_prompt_above:g}"
    return (f"{start}: {spec.title} draws with a negative prompt only at a guidance above {above}, not at "
            f"{guidances}. Raise the guidance (the Sample settings tab's, or a prompt's --l) above {above}, or "
            "take the negative prompt out")


def _prompts_named(numbers: list[str], many: str = "hold", one: str = "holds") -> str:
    """The start of a sentence naming prompts by number: Sample prompt 2 holds, Sample prompts 2, 3 and 5 hold."""
    if len(numbers) == 1:
        return f"Sample prompt {numbers[0]} {one}"
    return f"Sample prompts {', '.join(numbers[:-1])} and {numbers[-1]} {many}"
