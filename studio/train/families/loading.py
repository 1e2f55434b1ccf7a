"""Where a base model comes from (folder, single file or hub id), checked before loading.

Each failure names the path and what was expected, so a person can fix the config.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from safetensors import SafetensorError

from studio.core.config.rules.pickled import is_pickle_file
from studio.core.models.files import (
    FAMILY_NAMES,
    KIND_NAMES,
    OFFLINE_KINDS,
    SINGLE_FILE_SUFFIXES,
    ModelFileError,
    ModelInfo,
    detect_model,
    model_from_tensors,
    other_format_refusal,
    read_json,
)
from studio.core.models.hub_cache import cached_snapshot, missing_components
from studio.core.models.weight_files import WeightProblem, weight_problem_at
from studio.train.errors import TrainError

Source = Literal["folder", "file", "hub"]
T = TypeVar("T")

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
        _refuse_damaged(_model_info(path).damaged)
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
        missing = _model_info(path).missing  # a tokenizer folder without its vocabulary, named
        if missing:
            raise TrainError("model", f"{path} cannot be trained from: {missing}",
                             "bring back the tokenizer's vocabulary file named above, or download the model again",
                             path=str(path))
        _refuse_damaged(_model_info(path).damaged)  # a weight file cut short, a config that does not fit it
        return "folder"
    if path.is_file():  # a file of another format (GGUF, ...): there, but not one the studio reads
        raise TrainError("model", f"{path} cannot be trained from: {other_format_refusal(path)}",
                         "point model.base at a .safetensors checkpoint or a diffusers folder", path=str(path))
    if path.is_absolute() or base.startswith((".", "~")) or base.count("/") != 1:
        raise TrainError("model", f"the base model {path} does not exist",
                         "check model.base: a diffusers folder, a .safetensors file or a hub id like org/name",
                         path=str(path))
    return "hub"


def detect_family(path: Path) -> tuple[str | None, str]:
    """(family, what showed it) of a diffusers folder or a single checkpoint file; None if unknown."""
    info = _model_info(path)
    return info.family, info.evidence


def _model_info(path: Path) -> ModelInfo:
    """What the model at `path` is; read once per version of the file (checking and loading both ask)."""
    try:
        stat = path.stat()
    except OSError:
        stat = None
    try:
        return _read_model_info(str(path), stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0)
    except ModelFileError as exc:
        raise TrainError("model", str(exc), "re-download the model or choose another one", path=str(path)) from None


@functools.lru_cache(maxsize=8)
def _read_model_info(path: str, _mtime_ns: int, _size: int) -> ModelInfo:
    file = Path(path)
    if is_pickle_file(path) and file.is_file():
        return _ckpt_info(file)
    return detect_model(file)


def _ckpt_info(path: Path) -> ModelInfo:
    """A .ckpt's kind from its tensor names and shapes: memory-mapped, weights-only (no code runs)."""
    import torch

    try:
        state = torch.load(str(path), map_location="cpu", mmap=True, weights_only=True)
    except Exception as exc:  # a damaged or pickled-object file: say so, with the loader's words
        raise ModelFileError(f"{path} cannot be read as a checkpoint ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
    while isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    tensors = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)} if isinstance(state, dict) else {}
    return model_from_tensors(set(tensors), lambda key: list(tensors[key].shape) if key in tensors else None)


def _refuse_damaged(problem: WeightProblem | None) -> None:
    if problem is not None:
        raise TrainError("model", f"the model cannot be loaded: {problem.why}", problem.fix, path=problem.path)


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
        return read_json(path)
    except ModelFileError as exc:
        raise TrainError("model", str(exc), "rebuild or re-download the model folder", path=str(path)) from None


def hub_options(base: str, revision: str | None, variant: str | None = None) -> dict[str, Any]:
    """`local_files_only` for a hub id whose snapshot of `revision` is whole in the cache: it loads from there with
    no question to the hub, which a network that takes the connection and never answers (a stalled proxy, a
    captive portal) held for good before training began; empty for a folder, a hub id still to download, or a
    variant's files (the studio's download leaves them out, so they may still come from the hub)."""
    if variant or Path(base).expanduser().exists():
        return {}
    snapshot = cached_snapshot(base, revision)
    return {"local_files_only": True} if snapshot is not None and not missing_components(snapshot) else {}


def folder_dtypes(dtypes: dict[str, Any]) -> dict[str, Any]:
    """`dtype=` for a pipeline's from_pretrained (see FamilyAdapter.load_dtypes): components arrive
    in their training precision, with no full fp32 copy in RAM first when that is 16-bit."""
    import torch

    return {"dtype": dtypes} if dtypes["default"] in (torch.float16, torch.bfloat16) else {}


def load_or_fail(what: str, base: str, loader: Callable[[], T], hint: str | None = None) -> T:
    """Run a diffusers/transformers loader; turn its failure into a model error naming `base`."""
    try:
        return loader()
    except TrainError:
        raise
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        # A weight file damaged after the check before loading (or one it cannot see): named, not a crash.
        where: Path | None = Path(base).expanduser()
        if where is not None and not where.exists() and base.count("/") == 1:
            where = cached_snapshot(base)  # a hub id: its downloaded snapshot
        if where is not None:
            _refuse_damaged(weight_problem_at(where))
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        if not Path(base).expanduser().exists():  # taken as a hub id: it may be a mistyped folder too
            raise TrainError(
                "model", f'cannot load the {what} of "{base}": it is no folder or file on this machine, and '
                f"as a hub model id: {text}",
                "if it is a folder, check the path in model.base (a relative path starts at the config file's "
                "folder); if it is a hub id, check its spelling and connect to the internet once (then it is cached)",
                path=base,
            ) from None
        raise TrainError(
            "model", f"cannot load the {what} of {base}: {text}",
            hint or "check model.base; a hub id needs the internet once (then it is cached)",
            path=base,
        ) from None


def load_single_file(pipeline_class: Any, base: str, family: str, weight_dtype: Any, use_t5: bool = False,
                     **kwargs: Any) -> Any:
    """A pipeline from one checkpoint file, with the studio's own configs where it has them (no network).

    A file of 16-bit weights is loaded straight into the training precision when that is
    16-bit too: nothing is lost, and the weights stay memory-mapped from the file instead
    of being copied to fp32 first (SD1.5: 0.45 GB peak RAM instead of 6.5 GB,
    benchmarks/single_file_load.py).
    """
    from studio.train.pipelines.pipeline_configs import single_file_config

    path = Path(base).expanduser()
    info = _model_info(path)
    if str(weight_dtype) in ("torch.float16", "torch.bfloat16") and info.weights_16bit:
        kwargs.setdefault("dtype", weight_dtype)
    config = single_file_config(path, info, family, use_t5)
    return _follow_markers(_load_checkpoint_file(pipeline_class, path, base, info, config, family, use_t5, kwargs),
                           info)


def _load_checkpoint_file(pipeline_class: Any, path: Path, base: str, info: ModelInfo, config: Path | None,
                          family: str, use_t5: bool, kwargs: dict[str, Any]) -> Any:
    if config is not None:
        return load_or_fail("checkpoint", base, lambda: pipeline_class.from_single_file(
            str(path), config=str(config), local_files_only=True, **kwargs),
            "the file may be damaged or not a complete checkpoint: re-download it, or choose another model")
    known = ", ".join(KIND_NAMES[k] for k in OFFLINE_KINDS)
    what = info.a_label if info.kind else "a checkpoint of a kind not recognised here"
    reason = " with T5" if use_t5 else ""
    hint = (f"this is {what}{reason}: its pipeline configs come from the Hugging Face hub (the studio has them "
            f"offline for {known}), so connect to the internet once, or convert it to a diffusers folder")
    return load_or_fail("checkpoint", base, lambda: pipeline_class.from_single_file(
        str(path), local_files_only=True, **kwargs), hint)


def vae_dtype(vae: object, weight_dtype: object) -> object:
    """The VAE's precision: fp32 when fp16 was asked for and the VAE is not fp16-safe.

    The SD/SDXL VAEs overflow to NaN in fp16; their configs say so with force_upcast,
    which an fp16-fixed VAE (e.g. madebyollin/sdxl-vae-fp16-fix) turns off.
    """
    import torch

    config = getattr(vae, "config", None)
    force_upcast = bool(getattr(config, "force_upcast", True))
    return torch.float32 if weight_dtype == torch.float16 and force_upcast else weight_dtype


def _follow_markers(pipe: Any, info: ModelInfo) -> Any:
    """A checkpoint that marks itself v-prediction (and zero terminal SNR) samples and trains that way;
    the family builds its training scheduler from this one, and model.prediction_type still wins."""
    if not info.v_prediction:
        return pipe
    scheduler_class: Any = type(pipe.scheduler)
    options: dict[str, Any] = {"prediction_type": "v_prediction"}
    if info.zero_terminal_snr:
        from diffusers import EulerDiscreteScheduler

        # Zero terminal SNR needs the schedule rescaled and the last timestep sampled (Euler does both).
        scheduler_class = EulerDiscreteScheduler
        options.update(rescale_betas_zero_snr=True, timestep_spacing="trailing")
    pipe.scheduler = scheduler_class.from_config(pipe.scheduler.config, **options)
    return pipe


def load_vae(path: str, family: str) -> object:
    """A separate VAE from model.vae: a diffusers folder, a single file or a hub id."""
    from diffusers import AutoencoderKL

    if Path(path).suffix.lower() in SINGLE_FILE_SUFFIXES:
        from studio.train.pipelines.pipeline_configs import config_folder

        if not Path(path).expanduser().is_file():
            raise TrainError("model", f"the VAE file {path} does not exist", "check model.vae in the config",
                             path=path)
        # A VAE file holds weights only; its config is the family's published one.
        folder = str(config_folder(family))
        return load_or_fail("VAE", path, lambda: AutoencoderKL.from_single_file(
            str(Path(path).expanduser()), config=folder, subfolder="vae", local_files_only=True),
            f"model.vae must be a {FAMILY_NAMES.get(family, family)} VAE (.safetensors, a diffusers folder "
            "or a hub id); re-download it or choose another")
    return load_or_fail("VAE", path, lambda: AutoencoderKL.from_pretrained(path))
