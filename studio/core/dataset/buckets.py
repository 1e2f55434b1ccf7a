"""Aspect-ratio buckets: which training size each image is resized and cropped to."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable


def bucket_sizes(resolution: int, step: int = 64, min_side: int = 256, max_side: int = 2048) -> list[tuple[int, int]]:
    """Every (width, height) on the step grid with at most resolution² pixels, sides within limits,
    and the square resolution itself. The trainer and the Dataset page's preview both use this."""
    lo, hi = min(min_side, resolution), max(max_side, resolution)
    # Limits off the grid (min_bucket = 300 at a step of 64) would make sides off it too (300x832, 492x512):
    # sides a latent grid or a transformer's patches do not divide. The limits move onto the grid, inward.
    lo, hi = -(-lo // step) * step, hi // step * step
    area = resolution * resolution
    sizes = {(resolution, resolution)}
    width = lo
    while width <= hi:
        height = min(hi, (area // width) // step * step)
        if height >= lo:
            sizes.add((width, height))
            sizes.add((height, width))
        width += step
    return sorted(sizes)


def bucket_for(size: tuple[int, int], buckets: list[tuple[int, int]]) -> tuple[int, int]:
    """The bucket whose aspect ratio is nearest the image's (ties go to the larger bucket)."""
    aspect = math.log(size[0] / max(1, size[1]))
    return min(buckets, key=lambda b: (abs(math.log(b[0] / b[1]) - aspect), -b[0] * b[1]))


def bucket_counts(
    sizes: Iterable[tuple[int, int]], resolution: int, step: int = 64, min_side: int = 256, max_side: int = 2048
) -> Counter[tuple[int, int]]:
    buckets = bucket_sizes(resolution, step, min_side, max_side)
    return Counter(bucket_for(s, buckets) for s in sizes)
