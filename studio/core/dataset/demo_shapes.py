"""The demo dataset: coloured shapes on plain backgrounds, each with a caption that says what it shows.

The captions describe the pictures exactly, so a model trained on them learns
something measurable; the same seed always writes the same files.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

from studio.core.text import with_article

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (240, 210, 40),
    "purple": (140, 50, 170),
    "orange": (245, 140, 30),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
SHAPES = ("circle", "square", "triangle", "diamond")
# Words of every demo caption; the tiny tokenizer's vocabulary covers them.
CAPTION_WORDS = ("a", "an", "on", "background", *SHAPES, *COLOURS)


@dataclass(frozen=True)
class DemoImage:
    path: Path
    caption: str
    shape: str
    colour: str
    background: str


def caption_for(shape: str, colour: str, background: str) -> str:
    return f"{with_article(f'{colour} {shape}')} on {with_article(background)} background"


def draw_shape(shape: str, colour: str, background: str, size: int, jitter: random.Random) -> Image.Image:
    """One picture: a shape filling about half the frame, slightly moved and scaled."""
    image = Image.new("RGB", (size, size), COLOURS[background])
    draw = ImageDraw.Draw(image)
    radius = size * jitter.uniform(0.25, 0.35)
    cx = size / 2 + jitter.uniform(-0.1, 0.1) * size
    cy = size / 2 + jitter.uniform(-0.1, 0.1) * size
    fill = COLOURS[colour]
    if shape == "circle":
        draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=fill)
    elif shape == "square":
        draw.rectangle((cx - radius, cy - radius, cx + radius, cy + radius), fill=fill)
    elif shape == "triangle":
        points = [
            (cx + radius * math.cos(a), cy + radius * math.sin(a))
            for a in (-math.pi / 2, math.pi / 6, 5 * math.pi / 6)
        ]
        draw.polygon(points, fill=fill)
    elif shape == "diamond":
        draw.polygon([(cx, cy - radius), (cx + radius, cy), (cx, cy + radius), (cx - radius, cy)], fill=fill)
    else:
        raise ValueError(f"unknown shape {shape!r}; known shapes: {', '.join(SHAPES)}")
    return image


def demo_items(count: int, seed: int) -> list[tuple[str, str, str]]:
    """(shape, colour, background) for each picture; every shape appears, colours never clash."""
    rng = random.Random(seed)
    names = list(COLOURS)
    items = []
    for index in range(count):
        shape = SHAPES[index % len(SHAPES)]
        colour = rng.choice(names)
        background = rng.choice([n for n in names if n != colour])
        items.append((shape, colour, background))
    return items


def write_demo_dataset(
    directory: str | Path, count: int = 24, size: int = 128, seed: int = 0
) -> list[DemoImage]:
    """Write `count` PNG pictures with `.txt` captions into `directory` (created if needed)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    if size < 16:
        raise ValueError(f"size must be at least 16 pixels, not {size}")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    jitter = random.Random(seed + 1)
    written = []
    for index, (shape, colour, background) in enumerate(demo_items(count, seed)):
        stem = f"{index:03d}-{colour}-{shape}"
        path = folder / f"{stem}.png"
        draw_shape(shape, colour, background, size, jitter).save(path)
        caption = caption_for(shape, colour, background)
        (folder / f"{stem}.txt").write_text(caption + "\n", encoding="utf-8")
        written.append(DemoImage(path, caption, shape, colour, background))
    return written
