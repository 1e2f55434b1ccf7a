"""The held-out share of the training images (dataset.validation_fraction) against the images there are:
how many it holds out (the trainer's own count) and, before any run, a share that would leave nothing to
train on, refused with the key, the value and what is allowed for that many images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studio.core.config.errors import ConfigIssue
from studio.core.dataset.edit_pairs.pairs import control_settings
from studio.core.dataset.layouts import DatasetError
from studio.core.dataset.scan import list_concept

KEY = "dataset.validation_fraction"


def held_out_count(images: int, fraction: float) -> int:
    """How many of `images` training images `fraction` holds out (at least one when it is above 0)."""
    return 0 if fraction <= 0 else max(1, round(images * fraction))


def largest_fraction(images: int) -> float:
    """The largest fraction of two decimals that leaves at least one of `images` to train on (0: none does)."""
    return next((hundredths / 100 for hundredths in range(99, 0, -1)
                 if held_out_count(images, hundredths / 100) < images), 0.0)


def split_problem(images: int, fraction: float, where: str = "") -> str | None:
    """What is wrong with holding out `fraction` of `images` training images, with what is allowed; or None."""
    count = held_out_count(images, fraction)
    if images == 0 or count < images:
        return None
    largest = largest_fraction(images)
    some = f"{images} training image{'s' if images != 1 else ''}{f' in {where}' if where else ''}"
    allowed = (f"allowed with {images} images: 0 (none held out) up to {largest:g} (holds out "
               f"{held_out_count(images, largest)}); e.g. 0.1 holds out {held_out_count(images, 0.1)}"
               if largest > 0 else "allowed: 0 (one image cannot be split)")
    return (f"holds out {count} of the {some}, leaving none to train on; {allowed}. Or add images, or name a "
            "dataset.validation_folder of other images")


def split_issue(config: Any, base_dir: Path | None = None) -> ConfigIssue | None:
    """The held-out share of `config` checked against its concept folders' images (listings only)."""
    fraction = float(config.dataset.validation_fraction)
    if fraction <= 0 or config.dataset.validation_folder:
        return None
    images, folders = 0, []
    controls = control_settings(config.dataset, base_dir)  # an edit pair's controls are not images held out
    for concept in config.dataset.concepts:
        try:
            listing = list_concept(concept, base_dir, controls)
        except (DatasetError, OSError):
            return None  # a folder that is not there is said by the dataset check
        images += len(listing.paths)
        folders.append(str(listing.result.folder))
    problem = split_problem(images, fraction, ", ".join(folders))
    return None if problem is None else ConfigIssue(key=KEY, value=fraction, message=problem)
