"""Training items from the config's concepts: images checked, captions prepared, buckets chosen.

Images are decoded with Pillow and numpy; EXIF orientation is honoured. Augmentations
(flip, random crop, tag shuffle, caption dropout) draw from a generator the caller seeds
per use, so a resumed run sees exactly what an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from studio.core.config.schema import ConceptSection, DatasetSection, TrainConfig
from studio.core.dataset.buckets import bucket_for
from studio.core.dataset.buckets import bucket_sizes as core_bucket_sizes
from studio.core.dataset.captions.caption_tags import join_tags, split_tags
from studio.core.dataset.edit_pairs.controls import ControlSettings
from studio.core.dataset.edit_pairs.pairs import control_settings
from studio.core.dataset.edit_pairs.training import control_limit, edit_training_refusal, pair_errors
from studio.core.dataset.image_facts import is_cut_off
from studio.core.dataset.image_pixels import as_rgb, shown_size, upright
from studio.core.dataset.image_rules import size_problem
from studio.core.dataset.layouts import resolve_folder
from studio.core.dataset.scan import (
    DatasetError,
    ImageEntry,
    ScanResult,
    scan_class_images,
    scan_concept_report,
)
from studio.train.data.masks import MaskSource, check_mask_files, mask_array
from studio.train.errors import TrainError

Warn = Callable[[str, "str | None", str], None]
# Longer captions are cut to this many characters before anything else: no text encoder reads more
# (CLIP 77 tokens, T5 at most 512, each a few characters), and tokenizing megabytes of text made
# each step that drew such an image take seconds.
MAX_CAPTION_CHARS = 8192


@dataclass(frozen=True)
class TrainItem:
    """One image the trainer sees, `repeats` times per epoch."""

    index: int
    path: Path
    caption: str
    repeats: int
    bucket: tuple[int, int]  # (width, height) in pixels
    size: tuple[int, int]  # (width, height) as shown, EXIF applied
    is_class: bool = False
    loss_weight: float = 1.0
    controls: tuple[Path, ...] = ()  # edit pairs: the control images, in the pipeline's order


@dataclass(frozen=True)
class LoadedImage:
    pixels: np.ndarray  # float32, (3, H, W), in [-1, 1]
    original_size: tuple[int, int]  # (height, width) before resizing, as SDXL's conditioning expects
    crop_top_left: tuple[int, int]  # (top, left)
    mask: np.ndarray | None = None  # float32, (1, H, W), in [0, 1]: the loss mask, cropped and flipped alike
    flipped: bool = False  # mirrored: an edit pair's controls are mirrored alike


# ---------------------------------------------------------------- buckets


def bucket_sizes(dataset: DatasetSection) -> list[tuple[int, int]]:
    """The config's buckets, exactly as the Dataset page previews them."""
    return core_bucket_sizes(dataset.resolution, dataset.bucket_step, dataset.min_bucket, dataset.max_bucket)


def choose_bucket(size: tuple[int, int], dataset: DatasetSection, sizes: list[tuple[int, int]] | None) -> tuple[int, int]:
    """The bucket whose aspect ratio is nearest the image's; square crops when buckets are off."""
    if not dataset.buckets or sizes is None:
        return dataset.resolution, dataset.resolution
    return bucket_for(size, sizes)


# ---------------------------------------------------------------- items


def _check_image(path: Path) -> tuple[int, int] | str:
    """(width, height) as shown, or why the file cannot be used (as the dataset check says it)."""
    try:
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            width, height = image.size
            image_format = image.format
            shown = shown_size(image)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        return f"cannot be read as an image ({exc.__class__.__name__}: {exc})"
    problem = size_problem(width, height)
    if problem is not None:
        return problem
    if is_cut_off(path, image_format):
        return "is cut off (truncated): a download or copy stopped partway"
    return shown


def _scan(concept: ConceptSection, warn: Warn, controls: ControlSettings | None = None) -> list[ImageEntry]:
    try:
        scan: ScanResult = scan_concept_report(concept, None, controls)
    except DatasetError as exc:
        raise TrainError("data", str(exc), "fix dataset.concepts in the config", path=concept.path) from None
    for folder, why in scan.unreadable_folders:
        warn(f"the folder {folder} cannot be read ({why}); its images are left out", str(folder),
             "give your user read access to it")
    return scan.entries


def _caption(entry: ImageEntry, warn: Warn) -> str | None:
    """The caption an entry trains with (cut to MAX_CAPTION_CHARS), or None when its caption file is unreadable."""
    if entry.caption_error is not None:
        warn(f"skipped {entry.path.name}: its caption {entry.caption_path} cannot be read ({entry.caption_error})",
             str(entry.caption_path), "give your user read access to the caption file, or write it again")
        return None
    if not entry.caption_utf8 and entry.caption_path is not None:
        warn(
            f"caption {entry.caption_path.name} is not UTF-8; it was read with a fallback encoding",
            str(entry.caption_path), "save the caption file as UTF-8",
        )
    caption = entry.caption or ""
    if len(caption) > MAX_CAPTION_CHARS:
        warn(f"the caption of {entry.path.name} is {len(caption):,} characters; only its first "
             f"{MAX_CAPTION_CHARS:,} are used (no text encoder reads more)",
             str(entry.caption_path or entry.path), "shorten the caption; put what matters first")
        caption = caption[:MAX_CAPTION_CHARS]
    if not caption and not entry.is_class:
        warn(f"{entry.path.name} has no caption; it trains with an empty prompt", str(entry.path),
             "add a .txt caption next to it or set the concept's instance_prompt")
    return caption


def collect_items(config: TrainConfig, warn: Warn) -> list[TrainItem]:
    """Every usable image of every concept; bad files are skipped with a warning.

    Raises TrainError(kind "data") when no concept is configured or no usable image is left.
    """
    dataset = config.dataset
    if not dataset.concepts:
        raise TrainError("data", "the config has no image folders", "add a [[dataset.concepts]] table with a path")
    controls = check_edit_pairs(config)  # a bundle run skips the studio's preflight: never train targets alone
    sizes = bucket_sizes(dataset) if dataset.buckets else None
    items: list[TrainItem] = []
    for concept in dataset.concepts:
        entries = _own_images(_scan(concept, warn, controls), concept, dataset)
        if not entries:
            raise TrainError(
                "data", f"the image folder {concept.path} holds no images",
                "add .png/.jpg/.webp images to it or remove the concept", path=concept.path,
            )
        class_entries = scan_class_images(concept) if concept.uses_prior_preservation else []
        if concept.class_path and concept.class_prompt is None:
            # Class images train with the class prompt as their caption: without one they were left out unsaid.
            warn(f"the class images in {concept.class_path} are not used: the concept {concept.path} has no "
                 "class_prompt, the caption prior preservation trains them with", concept.class_path,
                 "set the concept's class_prompt (\"a photo of a dog\", say), or clear its class_path")
        instance_count = sum(e.repeats for e in entries)
        if len(class_entries) > instance_count:
            # Each class image once an epoch beside fewer instance images (200 class images for 5 photos)
            # trained the class 40 times as often as the subject: the first ones, as many as those, balance them.
            warn(f"{len(class_entries)} class images for {instance_count} instance images (repeats counted) in "
                 f"{concept.path}: each epoch uses the first {instance_count} class images, as many as the "
                 "instance images, so the class does not outweigh the subject",
                 concept.class_path, "raise the concept's repeats to train with more of them (its own images "
                 "repeat as often), or leave it so")
            class_entries = class_entries[:instance_count]
        elif (concept.uses_prior_preservation and len(class_entries) < concept.num_class_images
              and config.method.kind != "dreambooth"):
            # Only DreamBooth makes the missing ones (before this): a LoRA's wanted class images are not made.
            where = f"the {len(class_entries)} in {concept.class_path}" if class_entries else "none"
            warn(f"{concept.path} wants {concept.num_class_images} class images but they are made for DreamBooth "
                 f"only (method.kind = \"dreambooth\"); this run trains with {where}",
                 concept.class_path or concept.path, "put images of the class in the concept's class_path, or set "
                 "num_class_images to 0 to train without class images")
        for entry in [*entries, *class_entries]:
            checked = _check_image(entry.path)
            if isinstance(checked, str):
                warn(f"skipped {entry.path.name}: it {checked}", str(entry.path), "replace or delete the file")
                continue
            caption = _caption(entry, warn)
            if caption is None:
                continue
            repeats = entry.repeats
            if entry.is_class:
                # Class images balance the instance images of their concept, as many as those.
                repeats = max(1, round(instance_count / max(1, len(class_entries))))
            items.append(TrainItem(
                index=len(items), path=entry.path, caption=caption, repeats=repeats,
                bucket=choose_bucket(checked, dataset, sizes), size=checked, is_class=entry.is_class,
                loss_weight=concept.prior_loss_weight if entry.is_class else 1.0, controls=entry.controls,
            ))
    if not any(not item.is_class for item in items):
        folders = ", ".join(c.path for c in dataset.concepts)
        raise TrainError("data", f"no usable training image is left in {folders}",
                         "see the warnings above for the files that were skipped", path=dataset.concepts[0].path)
    check_mask_files(items, dataset, warn)
    return items


def _own_images(entries: list[ImageEntry], concept: ConceptSection, dataset: DatasetSection) -> list[ImageEntry]:
    """A concept's images without those of its class images' folder or the mask folder (dataset.masks =
    "folder") kept inside it (images/class/, images/masks/): the concept walks into its subfolders, so each
    class image trained as the subject too, and each mask as a picture of its own (an empty caption)."""
    folders = [resolve_folder(path, None) for path in (
        concept.class_path if concept.uses_prior_preservation else None,
        dataset.mask_folder if dataset.masks == "folder" else None) if path]
    kept = [entry for entry in entries if not any(folder in entry.path.parents for folder in folders)]
    return kept if kept else entries  # such a folder is the image folder (or holds it): not for this to say


def check_edit_pairs(config: TrainConfig) -> ControlSettings | None:
    """How an edit-pair dataset finds its controls (None for images); raises TrainError when its family does not
    train edit pairs or a pair is broken (named with its file), as the preflight says before a run starts."""
    dataset = config.dataset
    refusal = edit_training_refusal(config)
    if refusal is not None:
        raise TrainError("config", *refusal)
    try:
        errors = pair_errors(dataset, None, control_limit(config))
    except DatasetError as exc:
        raise TrainError("data", str(exc), "fix dataset.concepts in the config", path=dataset.concepts[0].path) from None
    if errors:
        raise TrainError("data", f"edit pair {errors[0].path}: {errors[0].message}", errors[0].hint,
                         path=errors[0].path)
    return control_settings(dataset, None)


# ---------------------------------------------------------------- images


def cover_size(size: tuple[int, int], bucket: tuple[int, int]) -> tuple[int, int]:
    """(width, height) an image of `size` is resized to so that it covers `bucket`."""
    width, height = bucket
    scale = max(width / size[0], height / size[1])
    return max(width, round(size[0] * scale)), max(height, round(size[1] * scale))


def center_crop_conditioning(item: TrainItem) -> tuple[tuple[int, int], tuple[int, int]]:
    """(original size as (h, w), crop top-left) of the deterministic center crop, without decoding.

    What load_image(item, "center", False, None) reports; a cached latent was made that way.
    """
    new_w, new_h = cover_size(item.size, item.bucket)
    top, left = (new_h - item.bucket[1]) // 2, (new_w - item.bucket[0]) // 2
    return (item.size[1], item.size[0]), (top, left)


def load_image(
    item: TrainItem, crop: str, flip: bool, rng: np.random.Generator | None, masks: MaskSource | None = None
) -> LoadedImage:
    """Decode, orient, resize to cover the bucket, crop and maybe flip one image.

    The returned original size is the image's own (before resizing) and the crop's
    top-left is in the resized image, as SDXL's size and crop conditioning expects. With `masks`, the
    image's loss mask goes through the same resize, crop and flip.
    """
    width, height = item.bucket
    mask = None
    try:
        with Image.open(item.path) as raw:
            oriented = upright(raw)
            mask = masks.open(item.path, oriented) if masks is not None else None
            image = as_rgb(oriented)
    except (OSError, ValueError, SyntaxError) as exc:
        raise TrainError("data", f"{item.path} cannot be read: {exc}", "replace or delete the file",
                         path=str(item.path)) from None
    original = (image.height, image.width)
    new_w, new_h = cover_size(image.size, item.bucket)
    if (new_w, new_h) != image.size:
        image = image.resize((new_w, new_h), Image.Resampling.LANCZOS)
        mask = mask.resize((new_w, new_h), Image.Resampling.BILINEAR) if mask is not None else None
    if crop == "random" and rng is not None:
        left = int(rng.integers(0, new_w - width + 1))
        top = int(rng.integers(0, new_h - height + 1))
    else:
        left, top = (new_w - width) // 2, (new_h - height) // 2
    image = image.crop((left, top, left + width, top + height))
    array = np.asarray(image, dtype=np.float32)
    weights = mask_array(mask.crop((left, top, left + width, top + height))) if mask is not None else None
    if masks is not None and weights is None:
        weights = np.ones((1, height, width), dtype=np.float32)  # no mask: the whole image trains
    flipped = bool(flip and rng is not None and rng.random() < 0.5)
    if flipped:
        array = array[:, ::-1]
        weights = np.ascontiguousarray(weights[:, :, ::-1]) if weights is not None else None
        # The flipped crop starts where the unflipped one ended, seen from the other side.
        left = new_w - left - width
    pixels = np.ascontiguousarray(array.transpose(2, 0, 1)) / 127.5 - 1.0
    return LoadedImage(pixels.astype(np.float32), original, (top, left), weights, flipped)


# ---------------------------------------------------------------- captions


def prepare_caption(caption: str, dataset: DatasetSection, rng: np.random.Generator | None) -> str:
    """Tag shuffle (keeping the first `keep_tokens` tags in place) and caption dropout."""
    if rng is None:
        return caption
    if dataset.caption_dropout > 0 and rng.random() < dataset.caption_dropout:
        return ""
    if dataset.shuffle_tags:
        tags = split_tags(caption)
        kept, rest = tags[: dataset.keep_tokens], tags[dataset.keep_tokens:]
        order = rng.permutation(len(rest))
        return join_tags([*kept, *(rest[i] for i in order)])
    return caption
