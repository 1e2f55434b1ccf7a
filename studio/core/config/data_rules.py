"""Consistency rules of the held-out validation images and the loss masks (see schema.CONSISTENCY_RULES).

Each rule raises a Contradiction naming the key, its value and what to do.
"""

from __future__ import annotations

from typing import Any

from studio.core.config.errors import Contradiction


def check_validation(config: Any) -> None:
    d, t = config.dataset, config.training
    if d.validation_fraction > 0 and d.validation_folder:
        raise Contradiction("dataset.validation_fraction", d.validation_fraction,
                            "cannot be combined with dataset.validation_folder: hold out a share of the training "
                            "images or name a folder of other images, not both")
    if t.validation_every and not (d.validation_fraction > 0 or d.validation_folder):
        raise Contradiction("training.validation_every", t.validation_every,
                            "needs held-out images: set dataset.validation_fraction (e.g. 0.1) or "
                            "dataset.validation_folder, or set training.validation_every back to 0")


def check_masks(config: Any) -> None:
    d = config.dataset
    if d.masks == "folder" and not d.mask_folder:
        raise Contradiction("dataset.masks", "folder",
                            "needs dataset.mask_folder: the folder of mask images named as the training images")
