"""A sample prompt's own settings (--n --w --h --d --s --l), read as other trainers' prompt files write them, and
refused at load with the prompt's number and what to write when they cannot be drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio.core.config.errors import ConfigError
from studio.core.config.files.toml_file import load_config
from studio.core.config.prompt_options import PromptOptionError, PromptOptions, read_prompt, sample_draws
from studio.core.config.schema import SamplingSection
from tests.core.config.test_config import MINIMAL, write


def test_each_option_sets_its_own_setting_and_the_words_before_them_are_the_prompt() -> None:
    line = "a cat on a sofa --n blurry, lowres --w 768 --h 512 --d 42 --s 30 --l 7.5"
    assert read_prompt(line) == PromptOptions("a cat on a sofa", negative="blurry, lowres", width=768, height=512,
                                              seed=42, steps=30, guidance=7.5)
    assert read_prompt("a dog --L 3 --D 0") == PromptOptions("a dog", seed=0, guidance=3.0)
    assert read_prompt("a dog --n") == PromptOptions("a dog", negative="")
    # A dash in the words, a hyphenated word and a plain prompt are words.
    assert read_prompt("a well-lit room -- at night") == PromptOptions("a well-lit room -- at night")


def test_a_prompts_options_override_the_sample_settings_for_that_prompt_alone() -> None:
    sampling = SamplingSection(prompts=["a cat --w 768 --d 7 --n dark", "a dog"], negative_prompt="blurry",
                               seed=1, steps=20, guidance=5.0, size=None)
    cat, dog = sample_draws(sampling, 512)
    assert (cat.text, cat.negative, cat.width, cat.height, cat.seed, cat.steps, cat.guidance) == (
        "a cat", "dark", 768, 512, 7, 20, 5.0)
    assert (dog.text, dog.negative, dog.width, dog.height, dog.seed) == ("a dog", "blurry", 512, 512, 1)


@pytest.mark.parametrize(("line", "step", "said"), [
    ("a cat --w abc", 8, "--w abc: give the width in pixels as a whole number, such as --w 768"),
    ("a cat --s 2.5", 8, "--s 2.5: give the number of steps as a whole number, such as --s 30"),
    ("a cat --d -1", 8, "--d -1: give the seed as a whole number, such as --d 42"),
    ("a cat --l much", 8, "--l much: give the guidance as a number, such as --l 7.5"),
    ("a cat --h", 8, "--h (nothing): give the height in pixels as a whole number, such as --h 512"),
    ("a cat --w 770", 16, "--w 770: the samples are drawn at sides that are a multiple of 16 pixels; use 768 or 784"),
    ("a cat --w 8192", 8, "--w 8192: the width in pixels is from 64 to 4096"),
    ("a cat --s 0", 8, "--s 0: the number of steps is from 1 to 500"),
    ("a cat --l 70", 8, "--l 70: the guidance is from 0 to 50"),
    ("a cat --zz 3", 8, "--zz is not an option the samples take (they take --n (negative prompt), --w and --h "
                        "(width and height), --d (seed), --s (steps), --l (guidance)): take it and its value out"),
    ("a cat --w 512 --W 512", 8, "--w is given twice: keep one"),
])
def test_a_value_that_cannot_be_drawn_says_what_to_write(line: str, step: int, said: str) -> None:
    with pytest.raises(PromptOptionError) as raised:
        read_prompt(line, step)
    assert str(raised.value) == said


def test_a_bad_option_is_refused_at_load_with_the_prompts_number(tmp_path: Path) -> None:
    text = MINIMAL + '[sampling]\nevery_n_steps = 10\nprompts = ["a red circle", "a cat --ar 16:9"]\n'
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text))
    (issue,) = raised.value.issues
    assert issue.key == "sampling.prompts" and issue.message.startswith(
        "sample prompt 2: --ar is not an option the samples take")
    loaded = load_config(write(tmp_path, text.replace("--ar 16:9", "--w 768 --h 512")))
    assert loaded.sampling.prompts[1] == "a cat --w 768 --h 512"


def test_an_option_written_with_an_equals_sign_is_an_option() -> None:
    # "--w=768" drawn as words made a square picture with "--w=768" in its prompt, and no one said so.
    assert read_prompt("a cat --w=768 --h= 512 --n=blurry, dark --l=3.5") == PromptOptions(
        "a cat", negative="blurry, dark", width=768, height=512, guidance=3.5)
    with pytest.raises(PromptOptionError, match="--ar is not an option"):
        read_prompt("a cat --ar=16:9")


def test_a_prompt_of_options_alone_is_refused_at_load_with_its_number(tmp_path: Path) -> None:
    text = MINIMAL + '[sampling]\nevery_n_steps = 10\nprompts = ["a red circle", "--w 512 --d 3"]\n'
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text))
    (issue,) = raised.value.issues
    assert issue.key == "sampling.prompts" and issue.message.startswith(
        "sample prompt 2: it has options but no words to draw")
