"""The dataset settings of edit pairs (dataset.kind = "edit") and their consistency rule.

An edit pair is a target image (what the model learns to make), one or more control (reference)
images (what it starts from) and an instruction: the target's caption. Where the control images
are is studio.core.dataset.edit_pairs.controls' business; these fields say which layout to read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from studio.core.config.errors import Contradiction

DatasetKind = Literal["images", "edit"]
ControlLayout = Literal["auto", "folder", "suffix", "separate"]


class EditPairFields(BaseModel):
    """Fields of the dataset section (mixed into DatasetSection)."""

    kind: DatasetKind = Field(
        default="images", description="What an item is: an image with its caption, or an edit pair: a target "
        "image, its control (reference) images and an instruction, the target's caption.")
    control_layout: ControlLayout = Field(
        default="auto", description="With kind = \"edit\", where the control images are: folder (a control/ "
        "folder, or control_0/, control_1/…, beside the targets, named as them), suffix (name_control.png, "
        "name_control_0.png… beside name.png), separate (the control_folders, as ai-toolkit and musubi-tuner "
        "read them) or auto (the one the folder shows).")
    control_folders: list[str] = Field(
        default_factory=list, description="With kind = \"edit\": folders of control images outside the targets, "
        "one per reference, each image named as its target (name.png, or name_0.png, name_1.png… for several).")


def check_edit_pairs(config: Any) -> None:
    d = config.dataset
    if d.kind != "edit" and d.control_layout != "auto":
        raise Contradiction("dataset.control_layout", d.control_layout,
                            "acts only with dataset.kind = \"edit\" (edit pairs); set that, or leave it at \"auto\"")
    if d.kind != "edit" and d.control_folders:
        raise Contradiction("dataset.control_folders", d.control_folders,
                            "acts only with dataset.kind = \"edit\" (edit pairs); set that, or leave it empty")
    for index, folder in enumerate(d.control_folders):
        if not folder.strip():  # resolved, the config's own folder: the targets (or the project) read as controls
            raise Contradiction(f"dataset.control_folders[{index}]", folder,
                                "is empty: write the folder of control images, or take the empty entry out of the list")
    if d.kind != "edit" and config.sampling.control_image:
        raise Contradiction("sampling.control_image", config.sampling.control_image,
                            "acts only with dataset.kind = \"edit\" (samples edit it); set that, or leave it empty")
    if d.kind == "edit" and d.crop == "random":
        # A target cropped elsewhere than its control would teach the model to shift the picture.
        raise Contradiction("dataset.crop", "random", "edit pairs are cropped alike (target and controls at the "
                            "center, so they stay aligned); set dataset.crop = \"center\"")
    for index, concept in enumerate(d.concepts if d.kind == "edit" else ()):
        if concept.uses_prior_preservation:
            # A class image has no control: batched with pairs, the denoiser got fewer references than images.
            raise Contradiction(f"dataset.concepts[{index}].class_prompt", concept.class_prompt,
                                "class images (prior preservation) have no control image, so they cannot train "
                                "beside edit pairs; remove the concept's class_prompt (and class_path), or set "
                                "dataset.kind = \"images\"")
    if d.control_layout == "separate" and not d.control_folders:
        raise Contradiction("dataset.control_layout", "separate",
                            "needs dataset.control_folders: the folders of control images named as the targets")
    if d.control_layout in ("folder", "suffix") and d.control_folders:
        raise Contradiction("dataset.control_folders", d.control_folders,
                            f"are not read with dataset.control_layout = \"{d.control_layout}\"; set it to "
                            "\"separate\" (or \"auto\"), or empty the list")
