"""Consistency rules of the caches, the held-out validation images and the loss masks (see
schema.CONSISTENCY_RULES).

Each rule raises a Contradiction naming the key, its value and what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from studio.core.config.errors import Contradiction
from studio.core.config.prompt_options import PromptOptionError, read_prompt
from studio.core.families import family


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
    # Held-out images no validation loss measures would be left out of training for nothing.
    if not t.validation_every and d.validation_fraction > 0:
        raise Contradiction("dataset.validation_fraction", d.validation_fraction,
                            "holds images out of training for a validation loss that is never measured "
                            "(training.validation_every = 0): set training.validation_every (e.g. 100) or set "
                            "dataset.validation_fraction back to 0")
    if not t.validation_every and d.validation_folder:
        raise Contradiction("dataset.validation_folder", d.validation_folder,
                            "names images for a validation loss that is never measured (training.validation_every "
                            "= 0): set training.validation_every (e.g. 100) or leave dataset.validation_folder empty")


def check_sides(config: Any) -> None:
    """Every image side the run trains or samples at is a multiple of the family's (a transformer cuts its
    latents into 2x2 patches: 16 pixels); a side off it would fail at the first step, after the model loads."""
    spec, d = family(config.model.family), config.dataset
    step = spec.pixel_multiple
    if step <= 8:  # a UNet's VAE: the schema's multiple of 8 (its UNet takes any latent size)
        return
    sides = [("dataset.resolution", d.resolution), ("sampling.size", config.sampling.size)]
    if d.buckets:
        sides += [("dataset.bucket_step", d.bucket_step), ("dataset.min_bucket", d.min_bucket),
                  ("dataset.max_bucket", d.max_bucket)]
    for key, side in sides:
        if side is not None and side % step:
            lower, higher = side - side % step, side - side % step + step
            choices = f"{lower} or {higher}" if lower else str(higher)
            raise Contradiction(key, side, f"{spec.title} trains and samples at sides that are a multiple of {step} "
                                f"pixels; use {choices}")


def check_prompt_options(config: Any) -> None:
    """Each sample prompt's own options (--w 768 --d 42) can be drawn: a bad one is named at load, with the
    prompt's number, rather than as a failed sample hours into the run."""
    step = family(config.model.family).pixel_multiple
    for number, prompt in enumerate(config.sampling.prompts, 1):
        try:
            read_prompt(prompt, step)
        except PromptOptionError as exc:
            raise Contradiction("sampling.prompts", prompt, f"sample prompt {number}: {exc}") from None


def check_masks(config: Any) -> None:
    d = config.dataset
    if d.masks == "folder" and not d.mask_folder:
        raise Contradiction("dataset.masks", "folder",
                            "needs dataset.mask_folder: the folder of mask images named as the training images")


@dataclass(frozen=True)
class FieldsNeeded:
    """A choice the config can take only with another setting filled in: a form shows `fields` and waits."""

    key: str  # the choice made (dataset.masks)
    fields: tuple[str, ...]  # any one of them filled in completes it
    what: str  # what to fill in, in a person's words


class _Changed:
    """The settings of `config` with `changes` made, read by dotted key."""

    def __init__(self, config: Any, changes: Mapping[str, Any]) -> None:
        self.config, self.changes = config, changes

    def value(self, key: str) -> Any:
        section, name = key.split(".", 1)
        return self.changes[key] if key in self.changes else getattr(getattr(self.config, section), name)

    def number(self, key: str) -> float:
        found = self.value(key)
        return float(found) if isinstance(found, int | float) else 0.0  # a typed word is refused elsewhere

    def held_out(self) -> bool:
        return self.number("dataset.validation_fraction") > 0 or bool(self.value("dataset.validation_folder"))


def turned_off(config: Any, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that go back to their defaults with a change that turns their feature off, so it can be
    turned off from either end: the held-out images with validation every = 0, validation every with the
    last held-out images gone."""
    now = _Changed(config, changes)
    out: dict[str, Any] = {}
    if "training.validation_every" in changes and not now.number("training.validation_every"):
        out = {"dataset.validation_fraction": 0.0, "dataset.validation_folder": None}
    elif {"dataset.validation_fraction", "dataset.validation_folder"} & set(changes) and not now.held_out():
        out = {"training.validation_every": 0}
    return {key: value for key, value in out.items() if key not in changes and now.value(key) != value}


def fields_needed(config: Any, changes: Mapping[str, Any]) -> FieldsNeeded | None:
    """The choice among `changes` that needs a setting still empty (masks = "folder" and no mask folder yet),
    or None. A form asks for the setting instead of refusing the choice the person made first."""
    now = _Changed(config, changes)
    value, number, held_out = now.value, now.number, now.held_out
    measure = ("training.validation_every",)
    measure_what = ("Set validation every (e.g. 100) so the validation loss of the held-out images is measured; "
                    "{} is used once it is set.")
    checks: tuple[tuple[str, Callable[[], bool], tuple[str, ...], str], ...] = (
        ("dataset.masks", lambda: value("dataset.masks") == "folder" and not value("dataset.mask_folder"),
         ("dataset.mask_folder",), "Choose the folder of mask images (named as the training images: cat.png for "
         "cat.jpg) in mask folder; masks = folder is used once it is set."),
        ("training.validation_every", lambda: number("training.validation_every") > 0 and not held_out(),
         ("dataset.validation_fraction", "dataset.validation_folder"),
         "Set validation fraction (e.g. 0.1) or a validation folder of held-out images; validation every is "
         "used once one is set."),
        ("dataset.validation_fraction", lambda: held_out() and not number("training.validation_every"),
         measure, measure_what.format("validation fraction")),
        ("dataset.validation_folder", lambda: held_out() and not number("training.validation_every"),
         measure, measure_what.format("validation folder")),
    )
    for key, needs, fields, what in checks:
        if key in changes and needs():
            return FieldsNeeded(key, fields, what)
    return None


def check_caches(config: Any) -> None:
    """A cache holds what every step would otherwise compute; nothing may change it between steps."""
    t, d = config.training, config.dataset
    if t.cache_text_embeddings and config.method.train_text_encoder:
        raise Contradiction(
            "training.cache_text_embeddings",
            True,
            "cached text embeddings cannot be used while method.train_text_encoder = true "
            "(the encoder changes every step); turn one of them off",
        )
    if t.cache_text_embeddings and d.shuffle_tags:
        raise Contradiction(
            "training.cache_text_embeddings",
            True,
            "cached text embeddings cannot follow dataset.shuffle_tags = true "
            "(each step has a different caption); turn one of them off",
        )
    if config.model.text_encoder_on_cpu and not t.cache_text_embeddings:
        raise Contradiction(
            "model.text_encoder_on_cpu",
            True,
            "text encoders on the CPU need training.cache_text_embeddings = true (each step would otherwise "
            "encode its captions on the CPU); turn cache_text_embeddings on or this off",
        )
    # Dropout to the empty caption is cheap to cache too: caption_dropout is allowed with the cache.
    if t.cache_latents and (d.flip or d.crop == "random"):
        raise Contradiction(
            "training.cache_latents",
            True,
            "cached latents cannot follow dataset.flip or dataset.crop = \"random\" "
            "(each epoch sees a different image); turn the augmentation or the cache off",
        )
    if t.cache_latents_to_disk and not t.cache_latents:
        raise Contradiction(
            "training.cache_latents_to_disk", True, "needs training.cache_latents = true"
        )


def output_dir_named(value: str) -> str:
    """output.dir as written: resolved, an empty path is the config's own folder, and run folders would be made
    among the project's files."""
    if not value.strip():
        raise Contradiction("output.dir", value, "is empty: write the folder run folders are made in, such as "
                            "\"runs\" (the default), or \".\" for the config's own folder")
    return value
