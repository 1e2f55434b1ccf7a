"""Where a base model comes from (folder, single file or hub id), checked before loading.

Each failure names the path and what was expected, so a person can fix the config.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

from studio.train.errors import TrainError

Source = Literal["folder", "file", "hub"]
T = TypeVar("T")

# Pipeline classes named in model_index.json, by the family that trains them.
PIPELINE_FAMILIES: dict[str, str] = {
    "StableDiffusionPipeline": "sd15",
    "StableDiffusionImg2ImgPipeline": "sd15",
    "StableDiffusionInpaintPipeline": "sd15",
    "StableDiffusionXLPipeline": "sdxl",
    "StableDiffusionXLImg2ImgPipeline": "sdxl",
    "StableDiffusion3Pipeline": "sd3",
}
SINGLE_FILE_SUFFIXES = (".safetensors", ".ckpt")


def model_source(base: str, family: str) -> Source:
    """Check that `base` exists and is a model of `family`; say which kind of source it is."""
    path = Path(base).expanduser()
    if path.suffix.lower() in SINGLE_FILE_SUFFIXES:
        if not path.is_file():
            raise TrainError("model", f"the model file {path} does not exist",
                             "check model.base in the config (relative paths start at the config's folder)",
                             path=str(path))
        return "file"
    if path.is_dir():
        index = path / "model_index.json"
        if not index.is_file():
            raise TrainError(
                "model", f"{path} is not a diffusers model folder: it has no model_index.json",
                "point model.base at a diffusers folder (with unet/, vae/, text_encoder/...) or a .safetensors file",
                path=str(path),
            )
        _check_family(index, family)
        return "folder"
    if path.is_absolute() or base.startswith((".", "~")) or base.count("/") != 1:
        raise TrainError("model", f"the base model {path} does not exist",
                         "check model.base: a diffusers folder, a .safetensors file or a hub id like org/name",
                         path=str(path))
    return "hub"


def _check_family(index: Path, family: str) -> None:
    try:
        class_name = json.loads(index.read_text(encoding="utf-8")).get("_class_name", "")
    except (OSError, ValueError) as exc:
        raise TrainError("model", f"{index} cannot be read: {exc}", "rebuild or re-download the model folder",
                         path=str(index)) from None
    found = PIPELINE_FAMILIES.get(class_name)
    if found is not None and found != family:
        raise TrainError(
            "model",
            f"{index.parent} is a {found} model ({class_name}), but model.family is {family}",
            f"set model.family = \"{found}\" or choose a {family} model",
            path=str(index.parent),
        )


def load_or_fail(what: str, base: str, loader: Callable[[], T]) -> T:
    """Run a diffusers/transformers loader; turn its failure into a model error naming `base`."""
    try:
        return loader()
    except TrainError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise TrainError(
            "model", f"cannot load the {what} of {base}: {text}",
            "check model.base; a hub id needs the internet once, and a single file needs a "
            "diffusers config cached locally (or convert it to a diffusers folder)",
            path=base,
        ) from None
