"""A sample prompt's own settings, written after its words as people's prompt files of other trainers have them:
"a cat on a sofa --n blurry, lowres --w 768 --h 512 --d 42 --s 30 --l 7.5".

The words before the first option are what is drawn; each option sets one thing for this prompt alone, over the
Sample settings tab's value: --n the negative prompt, --w and --h the width and height, --d the seed, --s the
steps, --l the guidance. Read here once, for the config's check at load, the trainer's samples, the memory
estimate and the pre-run check.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# The bounds of the Sample settings tab's own values (schema.SamplingSection takes them from here).
SIZE_BOUNDS = (64, 4096)
STEPS_BOUNDS = (1, 500)
GUIDANCE_BOUNDS = (0.0, 50.0)
SEED_BOUNDS = (0, 2**32 - 1)

# An option is "--" and letters, standing alone ("a -- b" and "well-lit" are words), its value after a space or
# an equals sign ("--w 768", "--w=768", as other trainers' prompt files write both).
_OPTION = re.compile(r"(?:^|(?<=\s))--([A-Za-z]+)(?=\s|=|$)")
OPTIONS_TAKEN = "--n (negative prompt), --w and --h (width and height), --d (seed), --s (steps), --l (guidance)"


class PromptOptionError(ValueError):
    """An option of a sample prompt that cannot be drawn; the message says what to write instead."""


@dataclass(frozen=True)
class PromptOptions:
    """A sample prompt's words and the settings it gives itself (None: the Sample settings tab's value)."""

    text: str
    negative: str | None = None
    width: int | None = None
    height: int | None = None
    seed: int | None = None
    steps: int | None = None
    guidance: float | None = None


@dataclass(frozen=True)
class SampleDraw:
    """One sample picture's settings, each the prompt's own or the Sample settings tab's."""

    text: str
    negative: str
    width: int
    height: int
    seed: int
    steps: int
    guidance: float


def read_prompt(line: str, pixel_multiple: int = 8) -> PromptOptions:
    """The words of `line` and its options; a PromptOptionError for a value that cannot be drawn (a side off
    `pixel_multiple` pixels, a number out of the Sample settings tab's bounds) or an option the studio does not
    take."""
    found = list(_OPTION.finditer(line))
    if not found:
        return PromptOptions(line.strip())
    values: dict[str, Any] = {}
    for index, match in enumerate(found):
        name = match.group(1).lower()
        end = found[index + 1].start() if index + 1 < len(found) else len(line)
        value = line[match.end():end].strip()
        value = value[1:].strip() if value.startswith("=") else value
        key = _KEYS.get(name)
        if key is None:
            raise PromptOptionError(f"--{match.group(1)} is not an option the samples take (they take "
                                    f"{OPTIONS_TAKEN}): take it and its value out")
        if key in values:
            raise PromptOptionError(f"--{name} is given twice: keep one")
        values[key] = value if key == "negative" else _number(name, value, pixel_multiple)
    text = line[: found[0].start()].strip()
    if not text:  # drawn, it would be a picture of nothing in particular, named after no words
        raise PromptOptionError("it has options but no words to draw: write the prompt before its options, "
                                "such as a cat on a sofa --w 768")
    return PromptOptions(text, **values)


def sample_draws(sampling: Any, resolution: int, pixel_multiple: int = 8) -> list[SampleDraw]:
    """Each sample prompt's picture settings: its own options over `sampling`'s (a SamplingSection) values, the
    size `sampling.size` or else the training `resolution`."""
    side = sampling.size or resolution
    draws = []
    for line in sampling.prompts:
        own = read_prompt(line, pixel_multiple)
        draws.append(SampleDraw(
            own.text, sampling.negative_prompt if own.negative is None else own.negative,
            own.width or side, own.height or side, sampling.seed if own.seed is None else own.seed,
            own.steps or sampling.steps, sampling.guidance if own.guidance is None else own.guidance))
    return draws


def largest_side(width: int, height: int) -> int:
    """The side of a square of as many pixels as a picture (the memory a sample takes grows with its pixels)."""
    return math.isqrt(width * height - 1) + 1


_KEYS = {"n": "negative", "w": "width", "h": "height", "d": "seed", "s": "steps", "l": "guidance"}
_WHAT = {"w": "the width in pixels", "h": "the height in pixels", "d": "the seed", "s": "the number of steps",
         "l": "the guidance"}


def _number(name: str, value: str, pixel_multiple: int) -> int | float:
    """The number an option gives, checked against what the samples can draw."""
    low: float
    high: float
    if name == "l":
        low, high = GUIDANCE_BOUNDS
        example = "7.5"
        try:
            number: int | float = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise PromptOptionError(f"--l {value or '(nothing)'}: give {_WHAT[name]} as a number, "
                                    f"such as --l {example}")
    else:
        low, high = {"w": SIZE_BOUNDS, "h": SIZE_BOUNDS, "d": SEED_BOUNDS, "s": STEPS_BOUNDS}[name]
        example = {"w": "768", "h": "512", "d": "42", "s": "30"}[name]
        if not (value.isascii() and value.isdigit()):
            raise PromptOptionError(f"--{name} {value or '(nothing)'}: give {_WHAT[name]} as a whole number, "
                                    f"such as --{name} {example}")
        number = int(value)
    if not low <= number <= high:
        raise PromptOptionError(f"--{name} {value}: {_WHAT[name]} is from {_shown(low)} to {_shown(high)}")
    if name in "wh" and number % pixel_multiple:
        lower = int(number) - int(number) % pixel_multiple
        choices = " or ".join(str(side) for side in (lower, lower + pixel_multiple) if side >= SIZE_BOUNDS[0])
        raise PromptOptionError(f"--{name} {value}: the samples are drawn at sides that are a multiple of "
                                f"{pixel_multiple} pixels; use {choices}")
    return number


def _shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)
