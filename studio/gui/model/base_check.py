"""The base model's line on the Model page: what the folder, file or hub id named as `model.base` is,
and what to do when it cannot be trained from."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from studio.core.app_words import command_or_action
from studio.core.config.schema import ModelSection
from studio.core.estimate.local_architecture import forget_local_architectures
from studio.core.families import title as family_title
from studio.core.models.files import ModelFileError, ModelInfo, detect_model, hub_need, single_file_refusal
from studio.core.models.hub_cache import cached_snapshot, missing_components
from studio.core.models.known import find_known
from studio.core.models.weight_files import variant_only


class BaseModelCheck:
    """Reads a model once per version of its file (the header of a big checkpoint), until told to forget."""

    def __init__(self, project_path: Callable[[str], Path]) -> None:
        self.project_path = project_path
        self._infos: dict[tuple[str, int, int], ModelInfo | ModelFileError] = {}

    def forget(self) -> None:
        """Read every model again next time: one built or copied in place may keep its folder's time."""
        self._infos.clear()
        forget_local_architectures()

    def info(self, path: Path) -> ModelInfo | ModelFileError | None:
        """What the model at `path` is; None when nothing is there."""
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in self._infos:
            try:
                self._infos[key] = detect_model(path)
            except ModelFileError as exc:
                self._infos[key] = exc
        return self._infos[key]

    def status(self, model: ModelSection) -> str:
        """The line under the base model: ✓ what it is, or ✗ what is wrong and what to do."""
        base = model.base
        path = self.project_path(base)
        if path.is_dir() and not (path / "model_index.json").is_file():
            return f"✗ {path} has no model_index.json: choose a diffusers model folder (with unet/, vae/, …)."
        info = self.info(path)
        if isinstance(info, ModelFileError):
            return f"✗ {info}"
        family = model.family
        if info is None:
            return self._status_elsewhere(model, path)
        if info.refused:
            return f"✗ {path.name} is {info.a_label}: {info.refused}."
        refusal = single_file_refusal(family) if path.is_file() else None
        if refusal and info.family in (None, family):
            return f"✗ {path.name} is a single checkpoint file: {refusal}."
        if info.family is None:
            return f"✓ Found: {path} ({info.evidence}; the family is checked when training starts)."
        if info.family != family:
            return (f"✗ {path.name} is {info.a_label} ({family_title(info.family)}), but the family is "
                    f"{family_title(family)}: set the family to {family_title(info.family)}, or choose another model.")
        found = variant_only(path) if info.folder else None
        if found is not None and found[1] != model.variant:
            return (f"✗ {path.name} holds {found[0]}'s weights only as {found[1]} files ({found[2].name}): set the "
                    f"variant to {found[1]}, or download the model's full-precision files.")
        need = hub_need(info, model)
        return f"✓ {info.label}: {path}" + (f" ({need})" if need else "")

    @staticmethod
    def _status_elsewhere(model: ModelSection, path: Path) -> str:
        """Nothing at `path`: a hub id (downloaded or not), a known model of another family, or a typo."""
        base, family = model.base, model.family
        known = find_known(base)
        if known is not None and known.family != family:
            return (f"✗ {base} is an {family_title(known.family)} model, but the family is "
                    f"{family_title(family)}: choose an {family_title(family)} model "
                    f"(the list below), or set the family back to {family_title(known.family)}.")
        parts = base.split("/")
        if len(parts) == 2 and all(parts) and not base.endswith((".safetensors", ".ckpt")):
            snapshot = cached_snapshot(base, model.revision)
            if snapshot is not None and not missing_components(snapshot):
                return f"✓ Hub id {base}: downloaded, it trains with no network."
            if known is None:  # the list below holds the models the studio knows, not this one
                how = command_or_action(f", or run `studio-train download {shlex.quote(base)}`", "")
                return f"Hub id {base}: not on this machine yet; Train offers to download it{how}."
            how = command_or_action(f" (or with `studio-train download {shlex.quote(base)}`)", "")
            return f"Hub id {base}: not on this machine yet. Download it from the list below{how} before training."
        return f"✗ Not found: {path}. Choose a folder or file that exists."
