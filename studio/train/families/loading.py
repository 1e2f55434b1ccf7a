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


FAMILY_NAMES = {"sd15": "SD 1.x/2.x", "sdxl": "SDXL", "sd3": "SD3"}


def model_source(base: str, family: str, needs: dict[str, str] | None = None) -> Source:
    """Check that `base` exists and is a model of `family`; say which kind of source it is.

    `needs` maps the pipeline components a folder must hold (e.g. "text_encoder_2") to
    what each one is, so a missing one is named in the error.
    """
    path = Path(base).expanduser()
    if path.suffix.lower() in SINGLE_FILE_SUFFIXES:
        if not path.is_file():
            raise TrainError("model", f"the model file {path} does not exist",
                             "check model.base in the config (relative paths start at the config's folder)",
                             path=str(path))
        found, evidence = detect_family(path)
        _refuse_mismatch(path, found, evidence, family)
        return "file"
    if path.is_dir():
        index = path / "model_index.json"
        if not index.is_file():
            raise TrainError(
                "model", f"{path} is not a diffusers model folder: it has no model_index.json",
                "point model.base at a diffusers folder (with unet/, vae/, text_encoder/...) or a .safetensors file",
                path=str(path),
            )
        found, evidence = detect_family(path)
        _refuse_mismatch(path, found, evidence, family)
        _check_components(path, family, needs or {})
        return "folder"
    if path.is_absolute() or base.startswith((".", "~")) or base.count("/") != 1:
        raise TrainError("model", f"the base model {path} does not exist",
                         "check model.base: a diffusers folder, a .safetensors file or a hub id like org/name",
                         path=str(path))
    return "hub"


def detect_family(path: Path) -> tuple[str | None, str]:
    """(family, what showed it) of a diffusers folder or a single checkpoint file; None if unknown."""
    if path.is_dir():
        return _folder_family(path)
    if path.suffix.lower() == ".safetensors":
        return _file_family(path)
    return None, "a .ckpt file's contents are not read before loading"


def _folder_family(folder: Path) -> tuple[str | None, str]:
    index = _read_json(folder / "model_index.json")
    class_name = str(index.get("_class_name", ""))
    if class_name in PIPELINE_FAMILIES:
        return PIPELINE_FAMILIES[class_name], class_name
    transformer = folder / "transformer" / "config.json"
    if transformer.is_file() and _read_json(transformer).get("_class_name") == "SD3Transformer2DModel":
        return "sd3", "transformer/config.json names SD3Transformer2DModel"
    unet = folder / "unet" / "config.json"
    if unet.is_file():
        if _read_json(unet).get("addition_embed_type") == "text_time":
            return "sdxl", "unet/config.json has SDXL's text_time conditioning"
        return "sd15", "unet/config.json has no SDXL conditioning"
    return None, f"model_index.json names {class_name or 'no pipeline class'}"


def _file_family(path: Path) -> tuple[str | None, str]:
    """Read only the file's header (tensor names), not its weights."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            keys = list(handle.keys())
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise TrainError("model", f"{path} cannot be read as a .safetensors file: {exc}",
                         "re-download the file or choose another model", path=str(path)) from None
    if any("joint_blocks" in k for k in keys):
        return "sd3", "it has MMDiT joint_blocks"
    if any(k.startswith("conditioner.embedders.1") or "label_emb" in k for k in keys):
        return "sdxl", "it has SDXL's second text encoder (conditioner.embedders.1) / label_emb"
    if any(k.startswith("model.diffusion_model.input_blocks") for k in keys) and any(
            k.startswith("cond_stage_model") for k in keys):
        return "sd15", "it has an SD 1.x/2.x UNet and cond_stage_model"
    return None, "its tensor names match no known family"


def _refuse_mismatch(path: Path, found: str | None, evidence: str, family: str) -> None:
    if found is None or found == family:
        return
    raise TrainError(
        "model",
        f"{path} is an {FAMILY_NAMES[found]} model ({found}: {evidence}), but model.family is "
        f"{family} ({FAMILY_NAMES.get(family, family)})",
        f"set model.family = \"{found}\" (or pick a {found} preset), or choose a {family} model",
        path=str(path),
    )


def _check_components(folder: Path, family: str, needs: dict[str, str]) -> None:
    index = _read_json(folder / "model_index.json")
    for name, what in needs.items():
        entry = index.get(name)
        declared = isinstance(entry, list) and len(entry) == 2 and entry[0] is not None
        if not declared or not (folder / name).is_dir():
            hint = f"point model.base at a complete {FAMILY_NAMES.get(family, family)} model folder"
            if name == "text_encoder_3":
                hint += ", or set model.use_t5 = false to train with the two CLIP encoders only"
            raise TrainError("model", f"{folder} has no {name} ({what})", hint, path=str(folder / name))


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrainError("model", f"{path} cannot be read: {exc}", "rebuild or re-download the model folder",
                         path=str(path)) from None
    return data if isinstance(data, dict) else {}


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


def vae_dtype(vae: object, weight_dtype: object) -> object:
    """The VAE's precision: fp32 when fp16 was asked for and the VAE is not fp16-safe.

    The SD/SDXL VAEs overflow to NaN in fp16; their configs say so with force_upcast,
    which an fp16-fixed VAE (e.g. madebyollin/sdxl-vae-fp16-fix) turns off.
    """
    import torch

    config = getattr(vae, "config", None)
    force_upcast = bool(getattr(config, "force_upcast", True))
    return torch.float32 if weight_dtype == torch.float16 and force_upcast else weight_dtype


def load_vae(path: str) -> object:
    """A separate VAE from model.vae: a diffusers folder, a single file or a hub id."""
    from diffusers import AutoencoderKL

    if Path(path).suffix.lower() in SINGLE_FILE_SUFFIXES:
        if not Path(path).expanduser().is_file():
            raise TrainError("model", f"the VAE file {path} does not exist", "check model.vae in the config",
                             path=path)
        return load_or_fail("VAE", path, lambda: AutoencoderKL.from_single_file(path, local_files_only=True))
    return load_or_fail("VAE", path, lambda: AutoencoderKL.from_pretrained(path))
