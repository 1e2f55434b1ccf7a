"""What a base model is, read from its folder's JSON or its checkpoint's header: no weights, no torch.

The Model & Preset page uses this to show the family as soon as a person picks a model,
and the trainer uses the same rules before loading (studio/train/families/loading.py).
A `.safetensors` file starts with 8 bytes giving the length of a JSON header that names
every tensor with its shape, so a 7 GB checkpoint is identified by reading a few hundred KB.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

FAMILY_NAMES = {"sd15": "SD 1.x/2.x", "sdxl": "SDXL", "sd3": "SD3", "flux2-klein": "FLUX.2 [klein]"}
# Pipeline classes named in model_index.json, by the family that trains them.
PIPELINE_FAMILIES: dict[str, str] = {
    "StableDiffusionPipeline": "sd15",
    "StableDiffusionImg2ImgPipeline": "sd15",
    "StableDiffusionInpaintPipeline": "sd15",
    "StableDiffusionXLPipeline": "sdxl",
    "StableDiffusionXLImg2ImgPipeline": "sdxl",
    "StableDiffusion3Pipeline": "sd3",
    "Flux2KleinPipeline": "flux2-klein",
}
SINGLE_FILE_SUFFIXES = (".safetensors", ".ckpt")
# Checkpoint kinds (diffusers' names where it has one) -> what a person reads.
KIND_NAMES = {
    "v1": "Stable Diffusion 1.x",
    "v2": "Stable Diffusion 2.x",
    "inpainting": "Stable Diffusion 1.x inpainting",
    "v2_inpainting": "Stable Diffusion 2.x inpainting",
    "xl_base": "SDXL base",
    "xl_inpaint": "SDXL inpainting",
    "xl_refiner": "SDXL refiner",
    "sd3": "SD3 medium",
    "sd35_medium": "SD3.5 medium",
    "sd35_large": "SD3.5 large",
}
KIND_FAMILIES = {"v1": "sd15", "v2": "sd15", "inpainting": "sd15", "v2_inpainting": "sd15", "xl_base": "sdxl",
                 "xl_inpaint": "sdxl", "xl_refiner": "sdxl", "sd3": "sd3", "sd35_medium": "sd3",
                 "sd35_large": "sd3"}
# The kinds the studio has pipeline configs for, so they load with no network.
OFFLINE_KINDS = ("v1", "xl_base", "sd3")
# Kinds the studio cannot train, and why.
_INPAINTING = "the studio trains text-to-image models only; choose the base (non-inpainting) model"
REFUSED_KINDS = {
    "inpainting": _INPAINTING,
    "v2_inpainting": _INPAINTING,
    "xl_inpaint": _INPAINTING,
    "xl_refiner": "the SDXL refiner has no CLIP-L text encoder and is not trained on its own; choose an SDXL base model",
}
_MAX_HEADER = 100 * 1024 * 1024
_HALF = {"F16", "BF16"}
_UNET = "model.diffusion_model."


class ModelFileError(ValueError):
    """A model file or folder that cannot be read; the message names it and says what to do."""


@dataclass(frozen=True)
class ModelInfo:
    family: str | None  # sd15 | sdxl | sd3, or None when unknown
    kind: str | None  # a KIND_NAMES key for a checkpoint file, None for folders and unknown files
    evidence: str  # what showed it, for messages
    missing: str | None = None  # what a checkpoint file lacks to be trained from, with what to do
    # Marker tensors some checkpoints carry (as ComfyUI reads them): "v_pred" for a v-prediction
    # model, "ztsnr" for one trained with zero terminal SNR.
    v_prediction: bool = False
    zero_terminal_snr: bool = False
    # Every floating-point tensor of the file is 16-bit, so loading straight into fp16/bf16 loses nothing.
    weights_16bit: bool = False

    @property
    def label(self) -> str:
        if self.kind:
            marks = " (v-prediction, zero terminal SNR)" if self.zero_terminal_snr else \
                " (v-prediction)" if self.v_prediction else ""
            return f"{KIND_NAMES[self.kind]} checkpoint{marks}"
        return f"{FAMILY_NAMES[self.family]} model" if self.family else "model of an unknown family"

    @property
    def a_label(self) -> str:
        """The label with its article: "an SDXL base checkpoint", "a Stable Diffusion 1.x checkpoint"."""
        return ("an " if self.label.startswith(("SD", "A", "E", "I", "O", "U")) else "a ") + self.label

    @property
    def offline(self) -> bool:
        """Whether a checkpoint file loads without the internet (folders always do)."""
        return self.kind is None or self.kind in OFFLINE_KINDS

    @property
    def refused(self) -> str | None:
        """Why the studio cannot train from this model, or None."""
        return REFUSED_KINDS.get(self.kind or "") or self.missing


def read_safetensors_header(path: Path) -> dict[str, list[int]]:
    """Every tensor's name and shape from a `.safetensors` file's header."""
    return {name: _shape(entry) for name, entry in _header_entries(path).items()}


def _shape(entry: dict[str, object]) -> list[int]:
    shape = entry.get("shape")
    return [int(d) for d in shape] if isinstance(shape, list) else []


def _header_entries(path: Path) -> dict[str, dict[str, object]]:
    """The header's entry of every tensor (dtype, shape, data offsets)."""
    try:
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ModelFileError(f"{path} is too short to be a .safetensors file ({len(prefix)} bytes)")
            if prefix.startswith(b"PK\x03\x04"):
                raise ModelFileError(f"{path} is a .ckpt checkpoint (a zip archive) named .safetensors: rename it "
                                     "to .ckpt, or download the .safetensors version")
            (length,) = struct.unpack("<Q", prefix)
            if not 2 <= length <= _MAX_HEADER:
                raise ModelFileError(f"{path} is not a .safetensors file (its header length {length} is impossible)")
            if length > os.fstat(handle.fileno()).st_size - 8:
                raise ModelFileError(f"{path} is cut short: its header alone should be {length} bytes; "
                                     "re-download the file")
            header = orjson.loads(handle.read(length))
    except OSError as exc:
        raise ModelFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, orjson.JSONDecodeError):
        raise ModelFileError(f"{path} has a damaged header: it is not a .safetensors file, or was cut short "
                             "while downloading") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path} has a damaged header (not a table of tensors)")
    header.pop("__metadata__", None)
    if all(type(entry) is dict for entry in header.values()):
        return header  # the usual case, without copying thousands of entries
    return {name: entry for name, entry in header.items() if isinstance(entry, dict)}


def detect_model(path: Path) -> ModelInfo:
    """The family (and for a checkpoint, the kind) of a diffusers folder or a single checkpoint file."""
    if path.is_dir():
        return _folder_model(path)
    if path.suffix.lower() == ".safetensors":
        entries = _header_entries(path)
        dtypes = {str(entry.get("dtype", "")) for entry in entries.values()}
        floats = {d for d in dtypes if d.startswith(("F", "BF"))}
        # Only a few shapes decide the kind: read those, not all of a checkpoint's thousands.
        info = model_from_tensors(set(entries), lambda name: _shape(entries[name]) if name in entries else None)
        return replace(info, weights_16bit=bool(floats) and floats <= _HALF)
    return ModelInfo(None, None, "a .ckpt file's contents are not read before loading")


def checkpoint_kind(keys: set[str], shape: Callable[[str], list[int] | None]) -> str | None:
    """The kind of an original-layout checkpoint from its tensor names and shapes; None if unknown."""
    joint = [k for k in keys if "joint_blocks." in k]  # a substring test first: regexes on thousands of keys are slow
    blocks = {int(m.group(1)) for k in joint if (m := re.match(r"model\.diffusion_model\.joint_blocks\.(\d+)\.", k))}
    if blocks:
        if any(".x_block.attn2." in k for k in joint):
            return "sd35_medium"
        return {24: "sd3", 38: "sd35_large"}.get(max(blocks) + 1)
    conv_in = shape(_UNET + "input_blocks.0.0.weight")
    in_channels = conv_in[1] if conv_in and len(conv_in) > 1 else 0
    if any(k.startswith("conditioner.embedders.1.") for k in keys):
        return {4: "xl_base", 9: "xl_inpaint"}.get(in_channels)
    if _UNET + "label_emb.0.0.weight" in keys:
        return "xl_refiner"
    context = shape(_UNET + "input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight")
    if not context:
        return None
    if context[-1] == 768:
        return {4: "v1", 9: "inpainting"}.get(in_channels)
    if context[-1] == 1024:
        return {4: "v2", 9: "v2_inpainting"}.get(in_channels)
    return None


def model_from_tensors(keys: set[str], shape: Callable[[str], list[int] | None]) -> ModelInfo:
    """What a checkpoint is from its tensor names and shapes (however they were read)."""
    kind = checkpoint_kind(keys, shape)
    if kind is not None:
        return ModelInfo(KIND_FAMILIES[kind], kind, "its tensor names and shapes", _missing(kind, keys),
                         v_prediction="v_pred" in keys, zero_terminal_snr="v_pred" in keys and "ztsnr" in keys)
    # Files of no known kind: the family alone, from names only.
    if any("joint_blocks" in k for k in keys):
        return ModelInfo("sd3", None, "it has MMDiT joint_blocks")
    if any(k.startswith("conditioner.embedders.1") or "label_emb" in k for k in keys):
        return ModelInfo("sdxl", None, "it has SDXL's second text encoder (conditioner.embedders.1) / label_emb")
    if any(k.startswith(_UNET + "input_blocks") for k in keys) and any(k.startswith("cond_stage_model") for k in keys):
        return ModelInfo("sd15", None, "it has an SD 1.x/2.x UNet and cond_stage_model")
    return ModelInfo(None, None, "its tensor names match no known family")


# Where each kind keeps its text encoders in a single file (every kind keeps its VAE in first_stage_model).
_TEXT_ENCODER_PREFIXES = {"sd15": ("cond_stage_model.",), "sdxl": ("conditioner.embedders.0.",),
                          "sd3": ("text_encoders.clip_l.", "text_encoders.clip_g.")}


def _missing(kind: str, keys: set[str]) -> str | None:
    """What a checkpoint lacks that a pipeline needs: files of the denoiser alone are common downloads."""
    lacks = [prefix for prefix in _TEXT_ENCODER_PREFIXES[KIND_FAMILIES[kind]]
             if not any(k.startswith(prefix) for k in keys)]
    if lacks:
        example = " (sd3_medium.safetensors is such a file; sd3_medium_incl_clips.safetensors is not)" \
            if KIND_FAMILIES[kind] == "sd3" else ""
        return (f"the file holds no text encoder ({', '.join(p.rstrip('.') for p in lacks)}){example}; choose "
                "a checkpoint that includes them, or a diffusers folder")
    if not any(k.startswith("first_stage_model.") for k in keys):
        return "the file holds no VAE (first_stage_model); choose a complete checkpoint, or a diffusers folder"
    return None


def _folder_model(folder: Path) -> ModelInfo:
    index = read_json(folder / "model_index.json")
    class_name = str(index.get("_class_name", ""))
    if class_name in PIPELINE_FAMILIES:
        return ModelInfo(PIPELINE_FAMILIES[class_name], None, class_name)
    transformer = folder / "transformer" / "config.json"
    if transformer.is_file() and read_json(transformer).get("_class_name") == "SD3Transformer2DModel":
        return ModelInfo("sd3", None, "transformer/config.json names SD3Transformer2DModel")
    unet = folder / "unet" / "config.json"
    if unet.is_file():
        if read_json(unet).get("addition_embed_type") == "text_time":
            return ModelInfo("sdxl", None, "unet/config.json has SDXL's text_time conditioning")
        return ModelInfo("sd15", None, "unet/config.json has no SDXL conditioning")
    return ModelInfo(None, None, f"model_index.json names {class_name or 'no pipeline class'}")


def read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ModelFileError(f"{path} is not valid JSON ({exc})") from None
    return data if isinstance(data, dict) else {}
