"""What a base model is, read from its folder's JSON or its checkpoint's header: no weights, no torch.

The Model & Preset page uses this to show the family as soon as a person picks a model,
and the trainer uses the same rules before loading (studio/train/families/loading.py).
A `.safetensors` file starts with 8 bytes giving the length of a JSON header that names
every tensor with its shape, so a 7 GB checkpoint is identified by reading a few hundred KB.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from studio.core.config.rules.pickled import PICKLE_SUFFIXES, is_pickle_file, pickle_refusal
from studio.core.families import FAMILIES, checkpoint_kinds, family, is_family
from studio.core.models.known import KnownModelsError, default_base
from studio.core.models.safetensors_header import ModelFileError, safetensors_entries
from studio.core.models.tokenizer_files import tokenizer_problem
from studio.core.models.weight_files import WeightProblem, cut_short, folder_weight_problem

FAMILY_NAMES = {spec.name: spec.title for spec in FAMILIES}
# Pipeline classes named in model_index.json, by the family that trains them.
PIPELINE_FAMILIES: dict[str, str] = {cls: spec.name for spec in FAMILIES for cls in spec.pipeline_classes}
SINGLE_FILE_SUFFIXES = (".safetensors", *PICKLE_SUFFIXES)
# Checkpoint kinds (diffusers' names where it has one) -> what a person reads, the family, ...
KIND_NAMES = {name: kind.title for name, (_spec, kind) in checkpoint_kinds().items()}
KIND_FAMILIES = {name: spec.name for name, (spec, _kind) in checkpoint_kinds().items()}
# The kinds the studio has pipeline configs for, so they load with no network.
OFFLINE_KINDS = tuple(name for name, (_spec, kind) in checkpoint_kinds().items() if kind.offline)
# What a checkpoint file of another kind needs, as the Model page and `studio-train model` say it: the trainer
# finds no configs of its own for it (studio/train/pipelines/pipeline_configs.py) and asks the hub.
HUB_CONFIGS_NOTE = ("its pipeline configs (model_index.json, each part's config.json, the tokenizers) come from the "
                    "Hugging Face hub: the first run needs the internet once")
# Kinds the studio cannot train, and why.
REFUSED_KINDS = {name: kind.refused for name, (_spec, kind) in checkpoint_kinds().items() if kind.refused}
_HALF = {"F16", "BF16"}


@dataclass(frozen=True)
class ModelInfo:
    family: str | None  # a registered family name, or None when unknown
    kind: str | None  # a KIND_NAMES key for a checkpoint file, None for folders and unknown files
    evidence: str  # what showed it, for messages
    missing: str | None = None  # what a checkpoint file or a folder lacks to be trained from, with what to do
    # Marker tensors some checkpoints carry (as ComfyUI reads them): "v_pred" for a v-prediction
    # model, "ztsnr" for one trained with zero terminal SNR.
    v_prediction: bool = False
    zero_terminal_snr: bool = False
    # Every floating-point tensor of the file is 16-bit, so loading straight into fp16/bf16 loses nothing.
    weights_16bit: bool = False
    pickled: str | None = None  # the path of a pickle file (.ckpt, .pt, .bin): refused unless model.allow_pickle
    # A folder's weight file cut short, or a config asking for more layers than its weights hold.
    damaged: WeightProblem | None = None
    folder: bool = False  # a diffusers folder (its configs are in it), not a checkpoint file

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
        """Whether the model loads without the internet: folders always do; a checkpoint file when the studio
        has its kind's configs (a file of no kind it knows takes them from the hub)."""
        return self.folder or self.kind in OFFLINE_KINDS

    @property
    def refused(self) -> str | None:
        """Why the studio cannot train from this model, or None."""
        return REFUSED_KINDS.get(self.kind or "") or self.missing or (str(self.damaged) if self.damaged else None) \
            or (pickle_refusal(self.pickled) if self.pickled else None)


def hub_need(info: ModelInfo, model: object | None = None) -> str | None:
    """What of a trainable model comes from the hub at its first run, in words; None when nothing does.

    `model` (a ModelSection) gives the settings that take a part of an offline kind from the hub (SD3's T5).
    """
    if info.family is None or info.refused:
        return None
    if not info.offline:
        return HUB_CONFIGS_NOTE
    setting = setting_hub_need(info)
    return setting[1] if setting and model is not None and getattr(model, setting[0], False) else None


def setting_hub_need(info: ModelInfo) -> tuple[str, str] | None:
    """(the setting, what it takes from the hub when on) for a checkpoint of an offline kind, or None."""
    kind = checkpoint_kinds()[info.kind][1] if info.kind else None
    if kind is None or kind.hub_when is None:
        return None
    setting, part = kind.hub_when
    return setting, (f"with {setting} on, {part} come from the Hugging Face hub: the first run needs the internet "
                     f"once (turn {setting} off to train with no network)")


def single_file_refusal(family_name: str) -> str | None:
    """Why a single checkpoint file cannot be a base model of `family_name`: a family that reads no checkpoint
    files (it declares no kinds) trains from a diffusers folder or hub id, as its trainer says at load; a person
    meets it with the diffusion model alone, kept apart from its text encoder and VAE. None for the others."""
    if not is_family(family_name) or family(family_name).kinds:
        return None
    try:
        download = f"download {default_base(family_name)} from the list of models"
    except KnownModelsError:
        download = "give its hub id"
    return (f"{family(family_name).title} trains from a diffusers folder or hub id (its transformer, VAE and text "
            f"encoder together); choose the model's folder, or {download}")


def read_safetensors_header(path: Path) -> dict[str, list[int]]:
    """Every tensor's name and shape from a `.safetensors` file's header."""
    return {name: _shape(entry) for name, entry in safetensors_entries(path).items()}


def _shape(entry: dict[str, object]) -> list[int]:
    shape = entry.get("shape")
    return [int(d) for d in shape] if isinstance(shape, list) else []


def detect_model(path: Path) -> ModelInfo:
    """The family (and for a checkpoint, the kind) of a diffusers folder or a single checkpoint file."""
    if path.is_dir():
        return _folder_model(path)
    if path.suffix.lower() == ".safetensors":
        entries = safetensors_entries(path)
        dtypes = {str(entry.get("dtype", "")) for entry in entries.values()}
        floats = {d for d in dtypes if d.startswith(("F", "BF"))}
        # Only a few shapes decide the kind: read those, not all of a checkpoint's thousands.
        info = model_from_tensors(set(entries), lambda name: _shape(entries[name]) if name in entries else None)
        return replace(info, weights_16bit=bool(floats) and floats <= _HALF, damaged=cut_short(path, entries))
    if is_pickle_file(str(path)):
        return ModelInfo(None, None, "a pickle file's contents are not read (loading one can run code)",
                         pickled=str(path))
    return ModelInfo(None, None, f"a {path.suffix} file is not a model format the studio reads",
                     missing=other_format_refusal(path))


def other_format_refusal(path: Path) -> str:
    """Why a file of a format the studio does not read is no base model, and what to choose instead."""
    instead = "choose the model's .safetensors file or its diffusers folder (or hub id)"
    if path.suffix.lower() == ".gguf":
        return f"a GGUF file holds weights quantized for generating images, which training cannot start from; {instead}"
    return f"the studio trains from .safetensors checkpoints and diffusers folders, not {path.suffix or 'such'} files; " \
        f"{instead}"


def checkpoint_kind(keys: set[str], shape: Callable[[str], list[int] | None]) -> str | None:
    """The kind of an original-layout checkpoint from its tensor names and shapes; None if unknown."""
    return next((kind for spec in FAMILIES if (kind := spec.checkpoint_kind(keys, shape)) is not None), None)


def model_from_tensors(keys: set[str], shape: Callable[[str], list[int] | None]) -> ModelInfo:
    """What a checkpoint is from its tensor names and shapes (however they were read)."""
    kind = checkpoint_kind(keys, shape)
    if kind is not None:
        return ModelInfo(KIND_FAMILIES[kind], kind, "its tensor names and shapes", _missing(kind, keys),
                         v_prediction="v_pred" in keys, zero_terminal_snr="v_pred" in keys and "ztsnr" in keys)
    # Files of no known kind: the family alone, from names only.
    for spec in FAMILIES:
        evidence = spec.tensor_rule(keys)
        if evidence is not None:
            return ModelInfo(spec.name, None, evidence)
    return ModelInfo(None, None, "its tensor names match no known family")


def _missing(kind: str, keys: set[str]) -> str | None:
    """What a checkpoint lacks that a pipeline needs: files of the denoiser alone are common downloads."""
    spec = family(KIND_FAMILIES[kind])
    lacks = [prefix for prefix in spec.single_file_text_encoders if not any(k.startswith(prefix) for k in keys)]
    if lacks:
        return (f"the file holds no text encoder ({', '.join(p.rstrip('.') for p in lacks)})"
                f"{spec.missing_text_encoder_example}; choose a checkpoint that includes them, or a diffusers folder")
    if not any(k.startswith("first_stage_model.") for k in keys):
        return "the file holds no VAE (first_stage_model); choose a complete checkpoint, or a diffusers folder"
    return None


def _folder_model(folder: Path) -> ModelInfo:
    index = read_json(folder / "model_index.json")
    class_name = str(index.get("_class_name", ""))
    found: tuple[str, str] | None = (PIPELINE_FAMILIES[class_name], class_name) if class_name in PIPELINE_FAMILIES \
        else next(((spec.name, evidence) for spec in FAMILIES
                   if (evidence := spec.folder_rule(folder, read_json)) is not None), None)
    if found is None:
        return ModelInfo(None, None, f"model_index.json names {class_name or 'no pipeline class'}", folder=True)
    components = [name for name, entry in index.items() if isinstance(entry, list) and entry and entry[0]]
    return ModelInfo(found[0], None, found[1], tokenizer_problem(folder, index),
                     damaged=folder_weight_problem(folder, components), folder=True)


def read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ModelFileError(f"{path} is not valid JSON ({exc})") from None
    return data if isinstance(data, dict) else {}
